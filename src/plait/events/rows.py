"""``Row``: a stored event as a store's reads fetch it, before it is decoded and checked."""

from __future__ import annotations

__all__ = ["Row"]

Row = tuple[int, bytes, bytes, str, int, str, int]
"""A stored event as reads fetch it: ``(position, data, hash, stream, seq, type, v)``. The
bytes say everything; the columns, which find rows, are checked against them.

A plain tuple, straight from the database driver: a rebuild reads millions of them.
"""
