"""Layout 4 of ``SqliteStore``: one row per append (docs/storage.md#one-row-per-append).

A row of ``groups`` holds the events of one append: their first position and seq, how many,
their stored bytes packed and compressed (``data``), and the hash of the last of them. Each
event's bytes are encoding 2's (docs/event-log.md#encoding) with their ``prev_hash`` cut out:
it is the hash of the event before, which the reader has, so 34 random bytes an event are not
stored. ``data`` is a format byte, then the raw deflate, with a preset dictionary, of the
msgpack array of ``[type, v, tail, bytes]`` per event (``tail``: how many bytes follow the cut).

A read gives each event back as the row of earlier layouts would (``Row``): its bytes whole,
its hash computed link by link from the row before; the last one must be the row's ``hash``,
else every event of the row carries that stored hash, which its bytes do not match, so a
checked read names it edited, as it would an edited row of an earlier layout.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from itertools import accumulate
from typing import Any

import msgspec

from plait.events.checks import columns_agree
from plait.events.codec import (
    BLOB_MARK,
    CURRENT_VERSIONS,
    GENESIS_HASH,
    decode_joined,
    hasher,
)
from plait.events.store import Row
from plait.events.types import Event

__all__ = [
    "GROUPS",
    "GroupRow",
    "Item",
    "all_rows",
    "batches",
    "expand",
    "item",
    "pack",
    "pack_items",
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
    data     BLOB    NOT NULL,
    hash     BLOB    NOT NULL,
    UNIQUE (stream, seq)
)""",
    "CREATE TABLE names (key INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
]
"""How a new store keeps its events (layout 4): a row per append, the stream's id as its key
in ``names``."""

GroupRow = tuple[int, int, int, bytes, bytes]
"""A row of ``groups`` as reads fetch it: ``(position, seq, count, data, hash)``."""

Query = Callable[[str, tuple[object, ...]], list[tuple[Any, ...]]]
"""The store's connection, asked one statement: its rows."""

# The columns are read from the rows themselves, not from the index that finds them (SQLite
# would read an indexed column from it), so a read checks what the rows hold.
_GROUPS_SQL = (
    "SELECT t.position, t.seq, t.count, t.data, t.hash "
    "FROM groups AS i CROSS JOIN groups AS t ON t.position = i.position "
    "WHERE i.stream = ?1 AND i.seq <= ?3 AND i.seq >= coalesce("
    "(SELECT max(seq) FROM groups WHERE stream = ?1 AND seq <= ?2 + 1), 1) "
    "ORDER BY i.seq LIMIT ?4"
)
"""A stream's rows (by its key) holding the events after seq ``?2`` up to ``?3``."""

_ALL_GROUPS_SQL = (
    "SELECT position, stream, seq, count, data, hash FROM groups WHERE position >= coalesce("
    "(SELECT max(position) FROM groups WHERE position <= ?1 + 1), 1) ORDER BY position LIMIT ?2"
)
"""The rows holding the events after position ``?1``."""

_KEY_SQL = (
    "SELECT t.key FROM names AS i CROSS JOIN names AS t ON t.key = i.key "
    "WHERE i.name = ?1 AND t.name = ?1"
)
"""A stream's key, found by the index and vouched for by the row (which reads across streams
name the rows by)."""

_PREV_GROUP_SQL = "SELECT hash FROM groups WHERE stream = ? AND seq < ? ORDER BY seq DESC LIMIT 1"

_FORMAT = 1
"""The first byte of ``data``: raw deflate with dictionary 1 (``dictionary-1.bin``)."""

_DICTIONARY = (resources.files(__package__) / "dictionary-1.bin").read_bytes()
"""What deflate may refer back to before a row's first byte: the msgpack of typical events
(field names, type names, common values), so even a row of one event compresses."""

_ROWS_READ = 64
"""Rows a rebuild reads at a time."""

_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: the ``prev_hash`` cut out
_LEVEL = 6

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[tuple[str, int, int, bytes]]).decode


Item = tuple[str, int, int, bytes]
"""One event in a row: its type, its version, how many bytes follow the cut (-1: none was
made), and its stored bytes with its ``prev_hash`` cut out."""


def pack(rows: Sequence[tuple[int, str, int, bytes, bytes]], prev: bytes) -> bytes:
    """``data`` of the row of an append's ``(seq, type, v, bytes, hash)`` rows, the first
    following the event of hash ``prev``."""
    items = []
    for _, type_name, v, data, digest in rows:
        items.append(item(type_name, v, data, prev))
        prev = digest
    return pack_items(items)


def item(type_name: str, v: int, data: bytes, prev: bytes | None = None) -> Item:
    """The ``Item`` of an event's stored bytes, whose ``prev_hash`` is ``prev`` (found in
    them if not given); bytes that do not hold it are kept whole."""
    if prev is None:
        prev = _held_prev_hash(data)
    # The last place: the field follows the body, and no UTF-8 text holds 0xc4 0x20.
    cut = data.rfind(_CUT + prev) if prev is not None else -1
    if cut < 0:
        return (type_name, v, -1, data)
    return (type_name, v, len(data) - cut - 34, data[:cut] + data[cut + 34 :])


def pack_items(items: Sequence[Item]) -> bytes:
    """``data`` of a row of ``items``."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15, zdict=_DICTIONARY)
    return bytes((_FORMAT,)) + packer.compress(_encode(items)) + packer.flush()


def unpack(data: bytes) -> list[Item]:
    """The items of a row's ``data``; raise ``ValueError`` if it is not one."""
    if data[:1] != bytes((_FORMAT,)):
        raise ValueError(f"unknown format {data[:1].hex() or 'of 0 bytes'}")
    try:
        unpacker = zlib.decompressobj(-15, zdict=_DICTIONARY)
        packed = unpacker.decompress(data[1:]) + unpacker.flush()
        if not unpacker.eof or unpacker.unused_data:  # raw deflate has no check of its own
            raise ValueError("the deflate stream does not end where the row does")
        return _decode(packed)
    except (zlib.error, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None


def whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes again, from an item's ``cut`` bytes, ``tail`` and ``prev``."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return b"".join((cut[:end], _CUT, prev, cut[end:]))


def expand(stream: str, row: GroupRow, prev: bytes) -> list[Row]:
    """The events of ``row`` of ``stream`` as rows of one event each (``Row``), the first
    following the event of hash ``prev``."""
    return _expanded(stream, row, prev)[0]


def _expanded(stream: str, row: GroupRow, prev: bytes) -> tuple[list[Row], bool]:
    """``expand``, and whether the row's hash is its last event's, as the chain computes it
    (else each of its events is given a hash its bytes do not match: the row's)."""
    position, seq, count, data, stored = row
    try:
        items = unpack(data)
    except ValueError:
        # Changed where deflate can tell: its first event is shown with bytes (the row's)
        # that do not match a hash, as an edited row of a layout of a row an event is.
        return [(position, data, bytes(32), stream, seq, "?", 0)], False
    compact = hasher(stream)
    out: list[Row] = []
    for i, (type_name, v, tail, cut) in enumerate(items):
        event = whole(cut, tail, prev)
        prev = compact(event) if event[0] >> 4 == 9 else hashlib.sha256(event).digest()
        out.append((position + i, event, prev, stream, seq + i, type_name, v))
    if prev == stored and len(out) == count:
        return out, True
    wrong = stored if prev != stored else bytes(32)
    return [(p, event, wrong, s, q, t, v) for p, event, _, s, q, t, v in out], False


def stream_rows(query: Query, stream: str, after: int, end: int, limit: int | None) -> list[Row]:
    """``stream``'s events with ``after < seq <= end``, at most ``limit``, as ``Row``s."""
    found = query(_KEY_SQL, (stream,))
    if not found:
        return []
    key = found[0][0]
    # From the row that holds the event after ``after``: each row holds an event at least.
    groups = query(_GROUPS_SQL, (key, after, end, -1 if limit is None else limit + 1))
    prev = _prev_hash(query, key, groups[0][1]) if groups else GENESIS_HASH
    rows: list[Row] = []
    for group in groups:
        rows += [row for row in expand(stream, group, prev) if after < row[4] <= end]
        prev = group[4]
    return rows if limit is None else rows[:limit]


def all_rows(
    query: Query, names: Callable[[set[int]], dict[int, str]], after: int, limit: int | None
) -> list[Row]:
    """The events of every stream after position ``after``, at most ``limit``, as ``Row``s;
    ``names`` names the streams' keys."""
    found = query(_ALL_GROUPS_SQL, (after, -1 if limit is None else limit + 1))
    named = names({key for _, key, *_ in found})
    prevs: dict[int, bytes] = {}  # by stream key: the hash of the row before
    rows: list[Row] = []
    for position, key, seq, count, data, stored in found:
        prev = prevs.get(key)
        if prev is None:
            prev = _prev_hash(query, key, seq)
        group = (position, seq, count, data, stored)
        rows += [row for row in expand(named[key], group, prev) if row[0] > after]
        prevs[key] = stored
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

    ``names`` names stream keys. A row checked
    whole, its events all of their current versions, is decoded in one call; any other goes
    the careful way (``careful``: ``decode_rows``), which names what is wrong.
    ``resolve_all(events, held)`` brings back the blobs of those ``held``.
    """
    prevs: dict[int, bytes] = {}  # by stream key: the hash of its last row read
    current = CURRENT_VERSIONS
    out: list[Event] = []
    after = after_position
    while True:
        rows = query(_ALL_GROUPS_SQL, (after, _ROWS_READ))
        for position, key, seq, count, data, stored in rows:
            if position + count - 1 <= after:
                continue  # read before: the row that held the position before ``after``
            stream = names({key})[key]
            prev = prevs.get(key)
            if prev is None:
                prev = _prev_hash(query, key, seq)
            prevs[key] = stored
            expanded, sound = _expanded(stream, (position, seq, count, data, stored), prev)
            fresh = [row for row in expanded if row[0] > after]
            if not fresh:
                continue
            events = None
            if sound and all(current.get(row[5]) == row[6] for row in fresh):
                joined = b"".join(row[1] for row in fresh)
                events = decode_joined(
                    joined,
                    [row[0] for row in fresh],
                    b"".join(row[2] for row in fresh),
                    [0, *accumulate(len(row[1]) for row in fresh)],
                    [stream] * len(fresh),
                    hashed=True,
                )
                said = (
                    [stream] * len(fresh),
                    [row[4] for row in fresh],
                    [row[5] for row in fresh],
                    [row[6] for row in fresh],
                )
                if events is not None and not columns_agree(events, said):
                    events = None
                elif events is not None and resolve_all is not None and BLOB_MARK in joined:
                    events = resolve_all(events, [e for e in events if e.body.BLOB_FIELDS])
            if events is None:
                events = careful(fresh)
            out += events
            after = position + count - 1
            while len(out) >= batch:
                yield out[:batch]
                out = out[batch:]
        if len(rows) < _ROWS_READ:
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
