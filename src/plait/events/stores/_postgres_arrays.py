"""An append's blobs, sent to PostgreSQL as binary arrays packed at once.

This is an internal part of ``PostgresStore``, not part of the public API.

psycopg adapts a list element by element, in Python, looking for the type of each: for an
append of one event, that was most of what the client spent on it. The blob columns of an
append are lists of one known type, so they are packed here in PostgreSQL's binary array
format (one dimension, no NULL, lower bound 1) in one pass.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import psycopg
from psycopg import adapt
from psycopg.abc import Buffer
from psycopg.pq import Format

__all__ = ["blob_columns"]

_HEADER = struct.Struct("!iiIii")  # dimensions, has NULLs, element type, length, lower bound
_LENGTH = struct.Struct("!i")


class _Array:
    """A one-dimensional array, none of it NULL."""

    __slots__ = ("items",)
    element = 0
    """The element type's oid."""

    def __init__(self, items: Sequence[object]) -> None:
        self.items = items

    def packed(self) -> bytes:
        """The array in PostgreSQL's binary format."""
        return _HEADER.pack(1, 0, self.element, len(self.items), 1) + self._elements()

    def _elements(self) -> bytes:
        parts: list[bytes] = []
        for item in self.items:
            data = item.encode() if isinstance(item, str) else item
            assert isinstance(data, bytes)
            parts += (_LENGTH.pack(len(data)), data)
        return b"".join(parts)


class TextArray(_Array):
    __slots__ = ()
    element = 25


class BytesArray(_Array):
    __slots__ = ()
    element = 17


class Int8Array(_Array):
    __slots__ = ()
    element = 20

    def _elements(self) -> bytes:
        pairs = (n for item in self.items for n in (8, item))
        return struct.pack("!" + "iq" * len(self.items), *pairs)


def _dumper(array_oid: int) -> type[adapt.Dumper]:
    class Dumper(adapt.Dumper):
        format = Format.BINARY
        oid = array_oid

        def dump(self, obj: _Array) -> Buffer:
            return obj.packed()

    return Dumper


# The classes are plait's: registering them changes nothing of anyone else's use of psycopg.
for _class, _oid in ((TextArray, 1009), (BytesArray, 1001), (Int8Array, 1016)):
    psycopg.adapters.register_dumper(_class, _dumper(_oid))


def blob_columns(blobs: Mapping[str, bytes]) -> tuple[_Array | None, ...]:
    """The array arguments of the append function after its first seven: the blobs' sha-256,
    size and bytes (NULL for none, which costs nothing to send)."""
    if not blobs:
        return (None, None, None)
    return (
        TextArray(list(blobs)),
        Int8Array([len(blob) for blob in blobs.values()]),
        BytesArray(list(blobs.values())),
    )
