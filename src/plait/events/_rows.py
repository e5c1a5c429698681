"""``Row``: an event of encoding 1 or 2 in a row of its own, as an evidence bundle of format 1
holds it (and as ``plait.events._stored`` reads an event moved from an earlier layout), before
it is decoded and checked."""

from __future__ import annotations

__all__ = ["Row"]

Row = tuple[int, bytes, bytes, str, int, str, int]
"""A stored event of encoding 1 or 2: ``(position, data, hash, stream, seq, type, v)``. The
bytes say everything; the columns, which found the row, are checked against them."""
