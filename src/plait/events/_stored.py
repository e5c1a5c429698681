"""A stream's rows as a store holds them, and how to read them back, whatever the layout.

Rows come in one of two layouts, which ``Stored`` names:

* ``PER_EVENT``: a row per event, ``(position, data, hash, stream, seq, type, v)`` (``Row``),
  its bytes of encoding 1 or 2 (``plait.events._codec``), each hashed alone: what no store
  keeps any more, but an evidence bundle of format 1 holds (``plait.events._bundle``);
* ``PER_APPEND``: a row per append, as every store keeps them, ``(position, stream, seq,
  count, prev_hash, hash, data)`` (``Packed``), its events of encoding 3
  (``plait.events._packing``); an event an earlier layout wrote, moved in whole (``prev_hash``
  empty), is a row of its own.

This is what ``verify``, evidence bundles, usage and retention read: each row's events checked
as every read checks them (docs/event-log.md#checked-reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

from plait._errors import CorruptEventError, TamperedError
from plait.events._codec import decode_rows, event_hash
from plait.events._packing import PackedRow, chain, is_packed, unpack
from plait.events._types import Event

if TYPE_CHECKING:
    from plait.events._blobstore import RedactedMarker
    from plait.events._rows import Row

__all__ = [
    "PER_APPEND",
    "PER_EVENT",
    "Packed",
    "Stored",
    "decode_packed",
    "row_events",
]

PER_EVENT: Final = 1
PER_APPEND: Final = 2

Packed = tuple[int, str, int, int, bytes, bytes, bytes]
"""A row of ``PER_APPEND``: ``(position, stream, seq, count, prev_hash, hash, data)``."""
_COLUMNS: Final = (
    ("position", int, "an integer"),
    ("stream", str, "text"),
    ("seq", int, "an integer"),
    ("count", int, "an integer"),
    ("prev_hash", bytes | memoryview, "bytes"),
    ("hash", bytes | memoryview, "bytes"),
    ("data", bytes | memoryview, "bytes"),
)
"""Each column of a ``Packed`` row: its name, its type, and what the type is called."""


class Stored(NamedTuple):
    """A stream as stored: what an evidence bundle copies byte for byte."""

    layout: int
    """``PER_EVENT`` or ``PER_APPEND``: what ``rows`` are."""
    rows: Sequence[Any]
    """Its rows, unchecked, in seq order."""
    head: tuple[int, bytes]
    """The stream's head: its last seq and hash."""
    blob: Callable[[str], bytes | RedactedMarker | None]
    """The store's blobs by sha-256 (``REDACTED``: deleted, a tombstone left)."""


def row_events(
    layout: int, rows: Sequence[Any], *, check: bool = True
) -> Iterator[tuple[int, list[Event]]]:
    """Each row's bytes as stored and its events, checked (``TamperedError`` at a row that
    does not hold what its hash and columns say) unless not ``check``."""
    if layout == PER_EVENT:
        for row in rows:
            per_event: Row = row
            yield len(per_event[1]) + len(per_event[2]), decode_rows([per_event], check=check)
        return
    digests: dict[str, Callable[[bytes, bytes | memoryview], bytes]] = {}
    for row in rows:
        packed = typed(row)
        yield _size(packed), decode_packed([packed], digests=digests, check=check)


def decode_packed(
    rows: Sequence[Packed],
    resolve: Callable[[Event], Event] | None = None,
    *,
    check: bool = True,
    digests: dict[str, Callable[[bytes, bytes | memoryview], bytes]] | None = None,
) -> list[Event]:
    """The events of rows of ``PER_APPEND``, each row checked (unless not ``check``);
    ``resolve`` is applied to those whose body may name a blob."""
    out: list[Event] = []
    digests = {} if digests is None else digests
    for position, stream, seq, count, prev, digest, data in map(typed, rows):
        if is_packed(data):
            link = digests.get(stream) or digests.setdefault(stream, chain(stream))
            row = PackedRow(seq, count, bytes(prev), bytes(digest), bytes(data))
            out += unpack(stream, position, row, check=check, digest=link, resolve=resolve)
        else:
            out.append(_moved(position, stream, seq, count, bytes(digest), bytes(data), check))
            if resolve is not None and out[-1].body.BLOB_FIELDS:
                out[-1] = resolve(out[-1])
    return out


def typed(row: Sequence[Any]) -> Packed:
    """``row`` of ``PER_APPEND``, each column of its type; else ``CorruptEventError`` naming
    the column (a damaged file: SQLite keeps a value of any type in any column)."""
    for (name, kind, called), value in zip(_COLUMNS, row, strict=True):
        if not isinstance(value, kind) or isinstance(value, bool):
            seq = row[2] if isinstance(row[2], int) else None
            why = f"the row's {name} holds a {type(value).__name__}, not {called} (damaged)"
            raise CorruptEventError(str(row[1]), seq, why)
    return cast(Packed, row)


def _moved(
    position: int, stream: str, seq: int, count: int, digest: bytes, data: bytes, check: bool
) -> Event:
    """An event an earlier layout wrote (encoding 1 or 2), moved to a row of its own."""
    if check:
        if count != 1:
            why = f"a row of an event of encoding 1 or 2 holds one, not {count} (edited)"
            raise TamperedError(stream, seq, why)
        if event_hash(stream, data) != digest:
            raise TamperedError(stream, seq, "stored bytes do not match their hash (edited)")
    (event,) = decode_rows([(position, data, digest, stream, seq, "", 0)], check=False)
    return event


def _size(row: Packed) -> int:
    return len(row[4]) + len(row[5]) + len(row[6])
