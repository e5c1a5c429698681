"""How ``SqliteStore`` reads layout 4 (``sqlite_groups.py``): a stream's rows from the first of
the chain of the row that holds what is asked, and every stream's in position order, each row
checked whole against the hash it keeps (docs/storage.md#one-row-per-append)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator

import msgspec

from plait.events.checks import columns_agree
from plait.events.codec import BLOB_MARK, CURRENT_VERSIONS, GENESIS_HASH
from plait.events.store import Row
from plait.events.stores.sqlite_groups import (
    CHAIN,
    GroupRow,
    Query,
    follow,
    unpacked,
    whole,
)
from plait.events.types import Event

__all__ = ["Chain", "all_rows", "batches", "stored_bytes", "stream_rows"]

_ROWS_READ = 64
"""Rows a rebuild reads at a time."""

_KNOWN = 256
"""Streams' chains kept between reads across streams, at most."""

_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_many = msgspec.msgpack.Decoder(list[Event]).decode
_set = msgspec.structs.force_setattr
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

_ALL_GROUPS_SQL = (
    "SELECT position, stream, seq, count, base, data, hash FROM groups WHERE position >= "
    "coalesce((SELECT max(position) FROM groups WHERE position <= ?1 + 1), 1) "
    "ORDER BY position LIMIT ?2"
)
"""The rows holding the events after position ``?1``."""

_KEY_SQL = "SELECT key FROM names WHERE name = ?"
"""A stream's key."""

_PREV_GROUP_SQL = "SELECT hash FROM groups WHERE stream = ? AND seq < ? ORDER BY seq DESC LIMIT 1"

_STORED_SQL = (
    "SELECT coalesce(sum(length(data) + length(hash)), 0) FROM groups "
    "WHERE stream = (SELECT key FROM names WHERE name = ?)"
)


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

    def events(
        self,
        row: GroupRow,
        careful: Callable[[list[Row]], list[Event]],
        resolve_all: Callable[[list[Event], list[Event]], list[Event]] | None,
    ) -> list[Event]:
        """``row``'s events: decoded in one call if it is sound and they are all of their
        types' current versions and of encoding 2 (their blobs brought back by
        ``resolve_all``), else read as rows and decoded by ``careful``, which names what is
        wrong."""
        read = self.read(row)
        events = self._decoded(row, read)
        if events is None:
            return careful(self._as_rows(row, read))
        if resolve_all is not None and BLOB_MARK in read[1]:
            return resolve_all(events, [e for e in events if e.body.BLOB_FIELDS])
        return events

    def _decoded(self, row: GroupRow, read: _Read) -> list[Event] | None:
        position, seq, count, _, _, stored = row
        header, body, hashes, prev = read
        if not header or _wrong(hashes, count, stored):
            return None
        types, versions, tails, _ = map(list, zip(*header, strict=True))
        if list(map(CURRENT_VERSIONS.get, types)) != versions or min(tails) < 0:
            return None  # an old version (lifted the careful way), or bytes kept whole
        try:
            events = _many(b"".join((b"\xdd", len(header).to_bytes(4, "big"), body)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        stream, set_ = self.stream, _set
        for event, digest in zip(events, hashes, strict=True):
            if event.stream or event.prev_hash:
                return None
            set_(event, "stream", stream)
            set_(event, "prev_hash", prev)
            set_(event, "position", position)
            set_(event, "hash", digest)
            prev, position = digest, position + 1
        said = ([stream] * len(types), list(range(seq, seq + len(types))), types, versions)
        return events if columns_agree(events, said) else None


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


class _Chains:
    """The chains of the streams a read across streams (in position order) has met, kept in
    ``known`` (by stream key) for the next read, if given: a live tail reads a row or two at
    a time, and would otherwise read each one's chain again."""

    def __init__(
        self,
        query: Query,
        names: Callable[[set[int]], dict[int, str]],
        known: dict[int, Chain] | None = None,
    ) -> None:
        self.query, self.names = query, names
        self.chains: dict[int, Chain] = {}
        self.known = {} if known is None else known
        if len(self.known) > _KNOWN:
            self.known.clear()

    def of(self, key: int, seq: int, base: int | None) -> Chain:
        """The chain of stream ``key`` at its row of ``seq``: this read's, or one an earlier
        read left at that row, or read from its start."""
        chain = self.chains.get(key)
        if chain is not None:
            return chain
        chain = self.known.get(key)
        if chain is None or chain.next != seq or (base is not None and base != chain.base):
            start = seq if base is None else base
            chain = Chain(self.names({key})[key], _prev_hash(self.query, key, start))
            for group in self.query(_GROUPS_SQL, (key, start, seq - 1, -1)):
                chain.read(group)  # rows before it in its chain: their bytes, their hash
        self.chains[key] = self.known[key] = chain
        return chain


def all_rows(
    query: Query,
    names: Callable[[set[int]], dict[int, str]],
    after: int,
    limit: int | None,
    known: dict[int, Chain] | None = None,
) -> list[Row]:
    """The events of every stream after position ``after``, at most ``limit``, as ``Row``s;
    ``names`` names the streams' keys; ``known`` keeps the chains read (``_Chains``)."""
    chains = _Chains(query, names, known)
    rows: list[Row] = []
    for position, key, seq, count, base, data, stored in query(
        _ALL_GROUPS_SQL, (after, -1 if limit is None else limit + 1)
    ):
        group = (position, seq, count, base, data, stored)
        rows += [row for row in chains.of(key, seq, base).rows(group) if row[0] > after]
        if limit is not None and len(rows) >= limit:
            break
    return rows if limit is None else rows[:limit]


def stored_bytes(query: Query, stream: str) -> int:
    """The bytes of ``stream``'s events as its rows keep them (their content apart)."""
    ((stored,),) = query(_STORED_SQL, (stream,))
    return int(stored)


def _prev_hash(query: Query, key: int, seq: int) -> bytes:
    """The hash of the row of stream ``key`` before the one at ``seq`` (its last event's)."""
    found = query(_PREV_GROUP_SQL, (key, seq))
    return bytes(found[0][0]) if found else GENESIS_HASH


def batches(
    query: Query,
    names: Callable[[set[int]], dict[int, str]],
    careful: Callable[[list[Row]], list[Event]],
    resolve_all: Callable[[list[Event], list[Event]], list[Event]] | None,
    after_position: int,
    batch: int,
) -> Iterator[list[Event]]:
    """Yield every event after ``after_position`` in lists of ``batch`` (the last shorter):
    a rebuild's read of layout 4.

    ``names`` names stream keys. A sound row whose events are all of their current versions
    is decoded in one call; any other goes the careful way (``careful``: ``decode_rows``),
    which names what is wrong. ``resolve_all(events, held)`` brings back the blobs of those
    ``held``.
    """
    chains = _Chains(query, names)
    out: list[Event] = []
    after = after_position
    while True:
        found = query(_ALL_GROUPS_SQL, (after, _ROWS_READ))
        for position, key, seq, count, base, data, stored in found:
            if position + count - 1 <= after:
                continue  # read before: the row that held the position before ``after``
            group = (position, seq, count, base, data, stored)
            chain = chains.of(key, seq, base)
            if position > after:
                events = chain.events(group, careful, resolve_all)
            else:  # it began before ``after``: its events after it, the careful way
                events = careful([row for row in chain.rows(group) if row[0] > after])
            out += events
            after = position + count - 1
            while len(out) >= batch:
                yield out[:batch]
                out = out[batch:]
        if len(found) < _ROWS_READ:
            break
    if out:
        yield out
