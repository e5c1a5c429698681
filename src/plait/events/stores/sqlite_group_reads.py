"""How ``sqlite_legacy`` reads a store of layout 4 (``sqlite_groups.py``) to move it: a
stream's rows from the first, each event as a row of one event (``Row``), with the hash its
bytes have, unless its row does not hold what its hash says."""

from __future__ import annotations

import hashlib

import msgspec

from plait.events.codec import GENESIS_HASH
from plait.events.store import Row
from plait.events.stores.sqlite_groups import (
    CHAIN,
    GroupRow,
    Query,
    follow,
    unpacked,
    whole,
)

__all__ = ["Chain", "stream_rows"]

_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_encode = msgspec.msgpack.Encoder().encode

_Read = tuple[list[tuple[str, int, int, int]], bytes, list[bytes], bytes]
"""A row as a chain reads it: its header, body and events' hashes, and the hash before."""

# The columns are read from the rows themselves, not from the index that finds them (SQLite
# would read an indexed column from it), so a read checks what the rows hold.
_GROUPS_SQL = (
    "SELECT t.position, t.seq, t.count, t.base, t.data, t.hash "
    "FROM groups AS i CROSS JOIN groups AS t ON t.position = i.position "
    "WHERE i.stream = ?1 AND i.seq >= ?2 AND i.seq <= ?3 ORDER BY i.seq LIMIT ?4"
)
"""A stream's rows (by its key) from seq ``?2`` to ``?3``."""

_START_SQL = "SELECT seq, base FROM groups WHERE stream = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
"""The row of a stream holding a seq, and where its chain starts."""

_KEY_SQL = "SELECT key FROM names WHERE name = ?"
"""A stream's key."""

_PREV_GROUP_SQL = "SELECT hash FROM groups WHERE stream = ? AND seq < ? ORDER BY seq DESC LIMIT 1"


class Chain:
    """What a reader of a stream's rows in seq order knows of the rows before: the hash of
    the last event, and the bytes of the rows of its chain a row may be compressed after."""

    __slots__ = ("base", "context", "next", "prev", "started", "stream")

    def __init__(self, stream: str, prev: bytes) -> None:
        self.stream = stream
        self.prev = prev
        self.base: int | None = None  # the seq of the row the chain read starts at
        self.context: list[bytes] = []
        self.next = 0  # the seq after the last row read
        self.started = hashlib.sha256(_encode(stream))

    def read(self, row: GroupRow) -> _Read:
        """The header, body and computed hashes of ``row``'s events (none if it cannot be
        unpacked), and the hash before its first; the chain moves past it, to the hash the
        row keeps."""
        _, seq, count, base, data, stored = row
        self.next = seq + count
        if base is None or base != self.base:  # a chain starts (or is not the one read)
            self.context, self.base = [], seq if base is None else None
        try:
            header, body, raw = unpacked(data, b"".join(self.context))
        except ValueError:
            before, self.context, self.prev = self.prev, [], stored
            return [], data, [], before
        self.context = follow(self.context, raw)
        before = prev = self.prev
        copy = self.started.copy
        hashes: list[bytes] = []
        keep = hashes.append
        view = memoryview(body)
        start = 0
        _, _, tails, lengths = zip(*header, strict=True) if header else ((),) * 4
        for tail, length in zip(tails, lengths, strict=True):
            end = start + length
            if tail >= 0 and length and body[start] >> 4 == 9:
                emptied = end - tail - 2
                running = copy()
                running.update(view[start:emptied])
                running.update(_CUT + prev)  # one call: the hot loop of a rebuild
                running.update(view[emptied + 2 : end])
            else:  # kept whole, or of encoding 1 (whose hash is of its bytes alone)
                event = whole(body[start:end], tail, prev)
                running = copy() if event[:1] >= b"\x90" else hashlib.sha256()
                running.update(event)
            prev = running.digest()
            keep(prev)
            start = end
        self.prev = stored
        return header, body, hashes, before

    def rows(self, row: GroupRow) -> list[Row]:
        """``row``'s events as rows of one event each (``Row``)."""
        return self._as_rows(row, self.read(row))

    def _as_rows(self, row: GroupRow, read: _Read) -> list[Row]:
        position, seq, count, _, data, stored = row
        header, body, hashes, prev = read
        if not header:  # unreadable: its first event is shown with bytes no hash matches
            return [(position, data, bytes(32), self.stream, seq, "?", 0)]
        wrong = _wrong(hashes, count, stored)
        out: list[Row] = []
        start = 0
        for i, (type_name, v, tail, length) in enumerate(header):
            event = whole(body[start : start + length], tail, prev)
            prev = hashes[i]
            out.append((position + i, event, wrong or prev, self.stream, seq + i, type_name, v))
            start += length
        return out


def _wrong(hashes: list[bytes], count: int, stored: bytes) -> bytes:
    """A hash no event of a row matches if the row is not as written (its last event's hash
    is not the one it keeps, or it holds more or fewer events than it says); else none."""
    if hashes[-1] != stored:
        return stored
    return bytes(32) if len(hashes) != count else b""


def stream_rows(query: Query, stream: str, after: int, end: int, limit: int | None) -> list[Row]:
    """``stream``'s events with ``after < seq <= end``, at most ``limit``, as ``Row``s."""
    found = query(_KEY_SQL, (stream,))
    if not found:
        return []
    key = found[0][0]
    # From the first row of the chain of the row that holds the event after ``after``.
    holding = query(_START_SQL, (key, after + 1))
    start = (holding[0][1] or holding[0][0]) if holding else 1
    most = -1 if limit is None else limit + 1 + CHAIN
    chain = Chain(stream, _prev_hash(query, key, start))
    rows: list[Row] = []
    for group in query(_GROUPS_SQL, (key, start, end, most)):
        rows += [row for row in chain.rows(group) if after < row[4] <= end]
        if limit is not None and len(rows) >= limit:
            break
    return rows if limit is None else rows[:limit]


def _prev_hash(query: Query, key: int, seq: int) -> bytes:
    """The hash of the row of stream ``key`` before the one at ``seq`` (its last event's)."""
    found = query(_PREV_GROUP_SQL, (key, seq))
    return bytes(found[0][0]) if found else GENESIS_HASH
