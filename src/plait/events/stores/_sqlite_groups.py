"""How ``sqlite_legacy`` reads a store of layout 4 to move it: its rows of ``groups``.

A row of ``groups`` held the events of one append: their first position and seq, how many,
their stored bytes packed and compressed (``data``), and the hash of the last of them. Each
event's bytes were encoding 2's (docs/event-log.md#encoding) with their ``prev_hash`` emptied
(the hash of the event before, which a reader has) and ids and digests made binary. A row was
compressed as raw deflate after dictionary 1 (``dictionary-1.bin``) and the rows of its
stream's chain before it (from the row at seq ``base``; ``NULL``: it began one). Small
content was kept in the row's ``content``, deflated after that dictionary and the stream's id.

Reading a stream's rows in seq order gives each event back whole, as layout 1 stored it, with
its hash computed link by link; the last one must be the row's ``hash``, else every event of
the row carries a hash its bytes do not match, so a checked read names it edited, as it did.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import zlib
from collections.abc import Iterator
from importlib import resources

import msgspec

from plait.events._codec import GENESIS_HASH, event_hash

__all__ = ["stream_events", "unpack_content"]


@functools.cache
def _dictionary() -> bytes:
    """What deflate may refer back to before a row's first byte: the msgpack of typical
    events (read when a store of layout 4 is first moved)."""
    return (resources.files(__package__) / "dictionary-1.bin").read_bytes()


_FORMAT = b"\x01"  # a row's first byte: what follows is raw deflate, as above
_WINDOW = 32_768  # what deflate can refer back to
_CONTEXT_ROWS = 2  # rows before it whose bytes a row's compression may refer back to
_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_header = msgspec.msgpack.Decoder(list[tuple[str, int, int, int]]).decode
_content = msgspec.msgpack.Decoder(list[bytes | tuple[bytes]]).decode

# Ids and digests were stored as their bytes behind the byte 0xc1 (which is never a msgpack
# type; one already there was stored doubled with 0): hex digests, then UUIDs.
_FROM_BINARY = re.compile(rb"\xc1(?:\x00|\x01([\x00-\xff]{32})|\x02([\x00-\xff]{16}))")

_ROWS_SQL = (
    "SELECT g.position, g.seq, g.count, g.base, g.data, g.hash FROM main.groups AS g "
    "JOIN main.names AS n ON n.key = g.stream WHERE n.name = ? ORDER BY g.seq"
)


def _text(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return b"\xd9\x40" + match.group(1).hex().encode()
    if match.group(2) is not None:
        h = match.group(2).hex()
        return f"\xd9\x24{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode("latin-1")
    return b"\xc1"


def _inflated(data: bytes, zdict: bytes) -> bytes:
    """Raw deflate ``data`` after ``zdict``; ``ValueError`` if it is not one whole stream."""
    try:
        unpacker = zlib.decompressobj(-15, zdict=zdict)
        found = unpacker.decompress(data) + unpacker.flush()
    except zlib.error as exc:
        raise ValueError(str(exc)) from None
    if not unpacker.eof or unpacker.unused_data:  # raw deflate has no check of its own
        raise ValueError("the deflate stream does not end where the row does")
    return found


def _unpacked(data: bytes, context: bytes) -> tuple[list[tuple[str, int, int, int]], bytes, bytes]:
    """A row's header (type, version, bytes after the emptied ``prev_hash`` or -1, length of
    each event), its events' bytes end to end, and its bytes that the next row of its chain
    was compressed after; ``ValueError`` if it is not one."""
    if data[:1] != _FORMAT:
        raise ValueError(f"unknown format {data[:1].hex() or 'of 0 bytes'}")
    zdict = (_dictionary() + context)[-_WINDOW:] if context else _dictionary()
    raw = _inflated(data[1:], zdict)
    try:
        packed = _FROM_BINARY.sub(_text, raw) if b"\xc1" in raw else raw
        size = int.from_bytes(packed[:4], "big")
        header = _header(packed[4 : 4 + size])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    body = packed[4 + size :]
    if sum(length for *_, length in header) != len(body):
        raise ValueError("its events' lengths do not add up to its bytes")
    return header, body, raw


def _whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes again, its ``prev_hash`` put back (``tail`` < 0: kept whole)."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return b"".join((cut[: end - 2], _CUT, prev, cut[end:]))


def stream_events(db: sqlite3.Connection, stream: str) -> Iterator[tuple[int, int, bytes, bytes]]:
    """Each event of ``stream``'s rows, in seq order: its position, seq, stored bytes and
    hash (one no bytes match, for each event of a row that is not as written; a row that
    cannot be read gives its first event its bytes as they are, and such a hash)."""
    prev = GENESIS_HASH
    context: list[bytes] = []  # the bytes of the last rows of the chain
    for position, seq, count, base, data, stored in db.execute(_ROWS_SQL, (stream,)):
        data, stored = bytes(data), bytes(stored)
        if base is None:  # it begins a chain
            context = []
        try:
            header, body, raw = _unpacked(data, b"".join(context))
        except ValueError:
            yield position, seq, data, bytes(32)
            prev, context = stored, []
            continue
        events: list[tuple[bytes, bytes]] = []
        start = 0
        for _, _, tail, length in header:
            event = _whole(body[start : start + length], tail, prev)
            prev = event_hash(stream, event)
            events.append((event, prev))
            start += length
        wrong = stored if prev != stored else (bytes(32) if len(events) != count else b"")
        for i, (event, digest) in enumerate(events):
            yield position + i, seq + i, event, wrong or digest
        prev = stored
        context = [*context, raw[-_WINDOW:]][-_CONTEXT_ROWS:]


def unpack_content(stream: str, content: bytes) -> list[bytes | tuple[bytes]]:
    """The blobs of a row's ``content`` of ``stream`` (a deleted one as the 1-tuple of its
    sha-256); raise ``ValueError`` if it holds none."""
    try:
        return _content(_inflated(content, _dictionary() + stream.encode()))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
