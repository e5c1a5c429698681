"""Layout 4 of ``SqliteStore``: one row per append (docs/storage.md#one-row-per-append).

A row of ``groups`` holds the events of one append: their first position and seq, how many,
their stored bytes packed and compressed (``data``), and the hash of the last of them. Each
event's bytes are encoding 2's (docs/event-log.md#encoding) with their ``prev_hash`` emptied:
it is the hash of the event before, which a reader has, so 32 random bytes an event are not
stored. A row may be compressed as the continuation of the rows of its stream before it
(from the row at seq ``base``), so what repeats from one turn to the next (ids, digests,
field names) is stored once.

A read gives each event back as the row of earlier layouts would (``Row``): its bytes whole,
its hash computed link by link from the row before; the last one must be the row's ``hash``,
else every event of the row carries a hash its bytes do not match, so a checked read names it
edited, as it would an edited row of an earlier layout.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from typing import Any

import msgspec

from plait.events.checks import columns_agree
from plait.events.codec import BLOB_MARK, CURRENT_VERSIONS, GENESIS_HASH
from plait.events.store import Row
from plait.events.types import Event

__all__ = [
    "CHAIN",
    "CONTEXT_ROWS",
    "DICTIONARY",
    "GROUPS",
    "NAME_SQL",
    "GroupRow",
    "Item",
    "Query",
    "all_rows",
    "batches",
    "item",
    "pack",
    "pack_items",
    "stream_items",
    "stream_rows",
    "unpack",
    "whole",
]

GROUPS = [
    """CREATE TABLE groups (
    position INTEGER PRIMARY KEY,
    stream   INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    count    INTEGER NOT NULL,
    base     INTEGER,
    data     BLOB    NOT NULL,
    hash     BLOB    NOT NULL,
    content  BLOB,
    UNIQUE (stream, seq)
)""",
    # One b-tree, by name: the keys are given in order under the write lock (``NAME_SQL``).
    "CREATE TABLE names (name TEXT PRIMARY KEY, key INTEGER NOT NULL) WITHOUT ROWID",
    # Where a row's small content is found: the first 8 bytes of a blob's sha-256 (as a
    # signed integer), and the position of the row that keeps it (``sqlite_content.py``).
    "CREATE TABLE contents (key INTEGER NOT NULL, position INTEGER NOT NULL, "
    "PRIMARY KEY (key, position)) WITHOUT ROWID",
]
"""How a new store keeps its events (layout 4): a row per append, the stream's id as its key
in ``names``; ``base``, the seq of the row of the stream from which this row's compression
goes on (``NULL``: the row stands alone); ``content``, the small blobs the append made
(``sqlite_content.py``)."""

GroupRow = tuple[int, int, int, int | None, bytes, bytes]
"""A row of ``groups`` as reads fetch it: ``(position, seq, count, base, data, hash)``."""

Query = Callable[[str, tuple[object, ...]], list[tuple[Any, ...]]]
"""The store's connection, asked one statement: its rows."""

CHAIN = 64
"""Rows at most in a chain of rows compressed one after the other: a read from the middle of
a stream starts at the first of its chain."""

CONTEXT_ROWS = 2
"""Rows before it whose bytes a row's compression may refer back to (a turn's two appends)."""

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

NAME_SQL = "INSERT OR IGNORE INTO names (name, key) SELECT ?, coalesce(max(key), 0) + 1 FROM names"
"""Give a name the next key (an insert at a time, in a write transaction)."""

_PREV_GROUP_SQL = "SELECT hash FROM groups WHERE stream = ? AND seq < ? ORDER BY seq DESC LIMIT 1"

_FORMAT = b"\x01"
"""The first byte of ``data``: what follows is raw deflate, with dictionary 1
(``dictionary-1.bin``) then the bytes of the rows of its chain before it, of the packed
events with their ids and digests made binary (``_binary``)."""

DICTIONARY = (resources.files(__package__) / "dictionary-1.bin").read_bytes()
"""What deflate may refer back to before a row's first byte: the msgpack of typical events
(field names, type names, common values), so even a row of one event compresses."""

_WINDOW = 32_768  # what deflate can refer back to
_ROWS_READ = 64
"""Rows a rebuild reads at a time."""

_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_EMPTIED = b"\xc4\x00"  # and of none: the ``prev_hash`` as stored
_LEVEL = 9

_encode = msgspec.msgpack.Encoder().encode
_header = msgspec.msgpack.Decoder(list[tuple[str, int, int, int]]).decode
_many = msgspec.msgpack.Decoder(list[Event]).decode
_set = msgspec.structs.force_setattr

# Lowercase hex digests and UUIDs, as msgpack strings, stored as their bytes (half the room,
# which deflate cannot find in text); the escape byte 0xc1 is never a msgpack type.
_TO_BINARY = re.compile(
    rb"\xd9\x40([0-9a-f]{64})|\xd9\x24([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-"
    rb"([0-9a-f]{12})|\xc1"
)
_FROM_BINARY = re.compile(rb"\xc1(?:\x00|\x01([\x00-\xff]{32})|\x02([\x00-\xff]{16}))")


def _binary(match: re.Match[bytes]) -> bytes:
    if match.group(1):
        return b"\xc1\x01" + bytes.fromhex(match.group(1).decode())
    if match.group(2):
        return b"\xc1\x02" + bytes.fromhex(b"".join(match.group(2, 3, 4, 5, 6)).decode())
    return b"\xc1\x00"


def _text(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return b"\xd9\x40" + match.group(1).hex().encode()
    if match.group(2) is not None:
        h = match.group(2).hex()
        return f"\xd9\x24{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode("latin-1")
    return b"\xc1"


_Read = tuple[list[tuple[str, int, int, int]], bytes, list[bytes], bytes]
"""A row as a chain reads it: its header, body and events' hashes, and the hash before."""

Item = tuple[str, int, int, bytes]
"""One event in a row: its type, its version, how many bytes follow its emptied
``prev_hash`` (-1: its bytes are kept whole), and its stored bytes, that hash emptied."""


def pack(
    rows: Sequence[tuple[int, str, int, bytes, bytes]], prev: bytes, context: bytes = b""
) -> tuple[bytes, bytes]:
    """``data`` of the row of an append's ``(seq, type, v, bytes, hash)`` rows, the first
    following the event of hash ``prev``, compressed after ``context`` (the bytes of the rows
    before it in its chain); and its own such bytes."""
    items = []
    for _, type_name, v, data, digest in rows:
        items.append(item(type_name, v, data, prev))
        prev = digest
    return pack_items(items, context)


def item(type_name: str, v: int, data: bytes, prev: bytes | None = None) -> Item:
    """The ``Item`` of an event's stored bytes, whose ``prev_hash`` is ``prev`` (found in
    them if not given); bytes that do not hold it are kept whole."""
    if prev is None:
        prev = _held_prev_hash(data)
    # The last place: the field follows the body, and no UTF-8 text holds 0xc4 0x20.
    cut = data.rfind(_CUT + prev) if prev is not None else -1
    if cut < 0:
        return (type_name, v, -1, data)
    return (type_name, v, len(data) - cut - 34, data[:cut] + _EMPTIED + data[cut + 34 :])


def pack_items(items: Sequence[Item], context: bytes = b"") -> tuple[bytes, bytes]:
    """``data`` of a row of ``items`` compressed after ``context``, and the row's bytes that
    a row after it in its chain is compressed after."""
    header = _encode([(t, v, tail, len(cut)) for t, v, tail, cut in items])
    packed = b"".join((len(header).to_bytes(4, "big"), header, *(cut for *_, cut in items)))
    raw = _TO_BINARY.sub(_binary, packed)
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15, zdict=_zdict(context))
    return _FORMAT + packer.compress(raw) + packer.flush(), raw


def unpack(data: bytes, context: bytes = b"") -> tuple[list[Item], bytes]:
    """The items of a row's ``data`` compressed after ``context``, and its bytes that a row
    after it is compressed after; raise ``ValueError`` if it is not one."""
    header, body, raw = _unpacked(data, context)
    items: list[Item] = []
    start = 0
    for type_name, v, tail, length in header:
        items.append((type_name, v, tail, body[start : start + length]))
        start += length
    return items, raw


def stream_items(rows: Iterable[tuple[int | None, bytes]]) -> Iterator[list[Item]]:
    """The items of each of a stream's rows ``(base, data)`` given in seq order, each
    unpacked after the rows before it in its chain (what tools reading a store's rows need)."""
    context: list[bytes] = []
    for base, data in rows:
        if base is None:
            context = []
        items, raw = unpack(data, b"".join(context))
        context = [*context, raw][-CONTEXT_ROWS:]
        yield items


def _unpacked(data: bytes, context: bytes) -> tuple[list[tuple[str, int, int, int]], bytes, bytes]:
    if data[:1] != _FORMAT:
        raise ValueError(f"unknown format {data[:1].hex() or 'of 0 bytes'}")
    try:
        unpacker = zlib.decompressobj(-15, zdict=_zdict(context))
        raw = unpacker.decompress(data[1:]) + unpacker.flush()
        if not unpacker.eof or unpacker.unused_data:  # raw deflate has no check of its own
            raise ValueError("the deflate stream does not end where the row does")
        packed = _FROM_BINARY.sub(_text, raw) if b"\xc1" in raw else raw
        size = int.from_bytes(packed[:4], "big")
        header = _header(packed[4 : 4 + size])
    except (zlib.error, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    body = packed[4 + size :]
    if sum(length for *_, length in header) != len(body):
        raise ValueError("its events' lengths do not add up to its bytes")
    return header, body, raw


def _zdict(context: bytes) -> bytes:
    return (DICTIONARY + context)[-_WINDOW:] if context else DICTIONARY


def whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes again, from an item's bytes, ``tail`` and ``prev``."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return b"".join((cut[: end - 2], _CUT, prev, cut[end:]))


class _Chain:
    """What a reader of a stream's rows in seq order knows of the rows before: the hash of
    the last event, and the bytes of the rows of its chain a row may be compressed after."""

    __slots__ = ("base", "context", "prev", "started", "stream")

    def __init__(self, stream: str, prev: bytes) -> None:
        self.stream = stream
        self.prev = prev
        self.base: int | None = None  # the seq of the row the chain read starts at
        self.context: list[bytes] = []
        self.started = hashlib.sha256(_encode(stream))

    def read(self, row: GroupRow) -> _Read:
        """The header, body and computed hashes of ``row``'s events (none if it cannot be
        unpacked), and the hash before its first; the chain moves past it, to the hash the
        row keeps."""
        _, seq, _, base, data, stored = row
        if base is None or base != self.base:  # a chain starts (or is not the one read)
            self.context, self.base = [], seq if base is None else None
        try:
            header, body, raw = _unpacked(data, b"".join(self.context))
        except ValueError:
            before, self.context, self.prev = self.prev, [], stored
            return [], data, [], before
        self.context = [*self.context, raw][-CONTEXT_ROWS:]
        before = prev = self.prev
        started = self.started
        hashes = []
        view = memoryview(body)
        start = 0
        for _, _, tail, length in header:
            end = start + length
            if tail >= 0 and length and body[start] >> 4 == 9:
                emptied = end - tail - 2
                running = started.copy()
                running.update(view[start:emptied])
                running.update(_CUT)
                running.update(prev)
                running.update(view[emptied + 2 : end])
            else:  # kept whole, or of encoding 1 (whose hash is of its bytes alone)
                event = whole(body[start:end], tail, prev)
                running = started.copy() if event[:1] >= b"\x90" else hashlib.sha256()
                running.update(event)
            prev = running.digest()
            hashes.append(prev)
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
        current = CURRENT_VERSIONS
        if any(current.get(t) != v or tail < 0 for t, v, tail, _ in header):
            return None
        try:
            events = _many(b"".join((b"\xdd", len(header).to_bytes(4, "big"), body)))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        stream = self.stream
        for i, event in enumerate(events):
            if event.stream or event.prev_hash:
                return None
            _set(event, "stream", stream)
            _set(event, "prev_hash", prev)
            _set(event, "position", position + i)
            prev = hashes[i]
            _set(event, "hash", prev)
        said = (
            [stream] * len(header),
            list(range(seq, seq + len(header))),
            [t for t, *_ in header],
            [v for _, v, *_ in header],
        )
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
    chain = _Chain(stream, _prev_hash(query, key, start))
    rows: list[Row] = []
    for group in query(_GROUPS_SQL, (key, start, end, most)):
        rows += [row for row in chain.rows(group) if after < row[4] <= end]
        if limit is not None and len(rows) >= limit:
            break
    return rows if limit is None else rows[:limit]


class _Chains:
    """The chains of the streams a read across streams (in position order) has met."""

    def __init__(self, query: Query, names: Callable[[set[int]], dict[int, str]]) -> None:
        self.query, self.names = query, names
        self.chains: dict[int, _Chain] = {}

    def of(self, key: int, seq: int, base: int | None) -> _Chain:
        """The chain of stream ``key`` at its row of ``seq``, read from its start if met now."""
        chain = self.chains.get(key)
        if chain is None:
            start = seq if base is None else base
            chain = _Chain(self.names({key})[key], _prev_hash(self.query, key, start))
            for group in self.query(_GROUPS_SQL, (key, start, seq - 1, -1)):
                chain.read(group)  # rows before it in its chain: their bytes, their hash
            self.chains[key] = chain
        return chain


def all_rows(
    query: Query, names: Callable[[set[int]], dict[int, str]], after: int, limit: int | None
) -> list[Row]:
    """The events of every stream after position ``after``, at most ``limit``, as ``Row``s;
    ``names`` names the streams' keys."""
    chains = _Chains(query, names)
    rows: list[Row] = []
    for position, key, seq, count, base, data, stored in query(
        _ALL_GROUPS_SQL, (after, -1 if limit is None else limit + 1)
    ):
        group = (position, seq, count, base, data, stored)
        rows += [row for row in chains.of(key, seq, base).rows(group) if row[0] > after]
        if limit is not None and len(rows) >= limit:
            break
    return rows if limit is None else rows[:limit]


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


def _held_prev_hash(data: bytes) -> bytes | None:
    """The ``prev_hash`` stored bytes hold, if they are an event's (either encoding)."""
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return None
    found = (
        raw.get("prev_hash")
        if isinstance(raw, dict)
        else raw[5]
        if isinstance(raw, list) and len(raw) > 5
        else None
    )
    return found if isinstance(found, bytes) and len(found) == 32 else None
