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

import functools
import operator
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from typing import Any

import msgspec

__all__ = [
    "CHAIN",
    "CONTEXT_ROWS",
    "DICTIONARY",
    "GROUPS",
    "NAME_SQL",
    "WINDOW",
    "GroupRow",
    "Item",
    "Query",
    "deflated",
    "follow",
    "inflated",
    "item",
    "pack",
    "pack_items",
    "stream_items",
    "unpack",
    "unpacked",
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
    # Where a row's small content is found: the first 4 bytes of a blob's sha-256 (as a
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

NAME_SQL = "INSERT OR IGNORE INTO names (name, key) SELECT ?, coalesce(max(key), 0) + 1 FROM names"
"""Give a name the next key (an insert at a time, in a write transaction)."""

_FORMAT = b"\x01"
"""The first byte of ``data``: what follows is raw deflate, with dictionary 1
(``dictionary-1.bin``) then the bytes of the rows of its chain before it, of the packed
events with their ids and digests made binary (``_binary``)."""

DICTIONARY = (resources.files(__package__) / "dictionary-1.bin").read_bytes()
"""What deflate may refer back to before a row's first byte: the msgpack of typical events
(field names, type names, common values), so even a row of one event compresses."""

_WINDOW = 32_768  # what deflate can refer back to, reading
_WINDOW_BITS = 13
WINDOW = 1 << _WINDOW_BITS
"""What a row's deflate refers back to, written: 8 KiB (a row of a turn, and the two before
it), so that writing it starts fast; reading, any window up to 32 KiB is read alike."""

_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_EMPTIED = b"\xc4\x00"  # and of none: the ``prev_hash`` as stored
_LEVEL = 6

_LENGTH = operator.itemgetter(3)  # of an event, in a row's header
_encode = msgspec.msgpack.Encoder().encode
_header = msgspec.msgpack.Decoder(list[tuple[str, int, int, int]]).decode

# Lowercase hex digests and UUIDs, as msgpack strings, stored as their bytes (half the room,
# which deflate cannot find in text), behind the byte 0xc1, which is never a msgpack type (one
# already there is stored doubled with 0). One pattern that starts with a literal byte: a
# third of the time of an alternation that does not.
_TO_BINARY = re.compile(
    rb"\xd9(?:\x40([0-9a-f]{64})|\x24([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-"
    rb"([0-9a-f]{12}))"
)
_FROM_BINARY = re.compile(rb"\xc1(?:\x00|\x01([\x00-\xff]{32})|\x02([\x00-\xff]{16}))")


def _binary(match: re.Match[bytes]) -> bytes:
    return _as_binary(match.group(0))


@functools.lru_cache(maxsize=4096)  # an append names its task and conversation many times
def _as_binary(text: bytes) -> bytes:
    if text[1] == 0x40:
        return b"\xc1\x01" + bytes.fromhex(text[2:].decode())
    return b"\xc1\x02" + bytes.fromhex(text[2:].replace(b"-", b"").decode())


def _binary_of(packed: bytes) -> bytes:
    """``packed`` with its ids and digests as bytes (``_text`` gives them back)."""
    return _TO_BINARY.sub(_binary, packed.replace(b"\xc1", b"\xc1\x00"))


def _text(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return b"\xd9\x40" + match.group(1).hex().encode()
    if match.group(2) is not None:
        h = match.group(2).hex()
        return f"\xd9\x24{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode("latin-1")
    return b"\xc1"


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
    raw = _binary_of(packed)
    return _FORMAT + deflated(raw, _zdict(context)), raw


def deflated(data: bytes, zdict: bytes) -> bytes:
    """``data`` as raw deflate, after ``zdict`` (what layout 4 stores, its rows and content)."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -_WINDOW_BITS, 6, zdict=zdict)
    return packer.compress(data) + packer.flush()


def inflated(data: bytes, zdict: bytes) -> bytes:
    """What ``deflated`` made of ``data`` after ``zdict``; raise ``ValueError`` if it is not
    one whole deflate stream."""
    try:
        unpacker = zlib.decompressobj(-15, zdict=zdict)  # reads any window up to 32 KiB
        found = unpacker.decompress(data) + unpacker.flush()
    except zlib.error as exc:
        raise ValueError(str(exc)) from None
    if not unpacker.eof or unpacker.unused_data:  # raw deflate has no check of its own
        raise ValueError("the deflate stream does not end where the row does")
    return found


def unpack(data: bytes, context: bytes = b"") -> tuple[list[Item], bytes]:
    """The items of a row's ``data`` compressed after ``context``, and its bytes that a row
    after it is compressed after; raise ``ValueError`` if it is not one."""
    header, body, raw = unpacked(data, context)
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
        context = follow(context, raw)
        yield items


def follow(context: list[bytes], raw: bytes, keep: int = _WINDOW) -> list[bytes]:
    """What the row after one of bytes ``raw`` is compressed after, the rows before it in
    its chain having been ``context``: the last ``CONTEXT_ROWS`` rows' bytes, each cut to the
    ``keep`` bytes deflate can refer back to (``WINDOW`` written, 32 KiB read)."""
    return [*context, raw[-keep:]][-CONTEXT_ROWS:]


def unpacked(data: bytes, context: bytes) -> tuple[list[tuple[str, int, int, int]], bytes, bytes]:
    """A row's header, its events' bytes end to end, and its bytes that a row after it is
    compressed after; raise ``ValueError`` if it is not one."""
    if data[:1] != _FORMAT:
        raise ValueError(f"unknown format {data[:1].hex() or 'of 0 bytes'}")
    raw = inflated(data[1:], _zdict(context))
    try:
        packed = _FROM_BINARY.sub(_text, raw) if b"\xc1" in raw else raw
        size = int.from_bytes(packed[:4], "big")
        header = _header(packed[4 : 4 + size])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    body = packed[4 + size :]
    if sum(map(_LENGTH, header)) != len(body):
        raise ValueError("its events' lengths do not add up to its bytes")
    return header, body, raw


def _zdict(context: bytes) -> bytes:
    return (DICTIONARY + context)[-_WINDOW:] if context else DICTIONARY


_content = msgspec.msgpack.Decoder(list[bytes | tuple[bytes]]).decode


def unpack_content(stream: str, content: bytes) -> list[bytes | tuple[bytes]]:
    """The blobs of a row's ``content`` of ``stream`` (a deleted one as the 1-tuple of its
    sha-256); raise ``ValueError`` if it holds none."""
    try:
        return _content(inflated(content, DICTIONARY + stream.encode()))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None


def whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes again, from an item's bytes, ``tail`` and ``prev``."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return b"".join((cut[: end - 2], _CUT, prev, cut[end:]))


def _held_prev_hash(data: bytes) -> bytes | None:
    """The ``prev_hash`` stored bytes hold, if they are an event's (either encoding)."""
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError:
        return None
    if isinstance(raw, dict):  # encoding 1: a map by field name
        found = raw.get("prev_hash")
    else:  # encoding 2: the envelope's fields in order, ``prev_hash`` the sixth
        found = raw[5] if isinstance(raw, list) and len(raw) > 5 else None
    return found if isinstance(found, bytes) and len(found) == 32 else None
