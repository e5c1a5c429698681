"""Encoding 3: an append as one row, its events chained and compressed together.

An append's events are stored as one row (docs/event-log.md#encoding-3): each event is an
``Entry``, the msgpack array of what the row does not already say (seq, time, version, body,
conversation and task); the entries, end to end, are one zstd frame, compressed with a
dictionary that ships in the package and is named by the frame. Each event's hash binds its
stream, the previous event's hash and its entry's bytes::

    hash = sha256(msgpack(stream) + prev_hash + entry)

so the previous hash is never part of an event's bytes: the row keeps the hash its first event
follows and its last event's hash, and nothing is cut out or spliced back on the way. Reading a
row decompresses it once, hashes each entry, and decodes the entries in one typed call; an entry
of an older body version takes the careful path through the upcasters.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

import msgspec

from plait._errors import CorruptEventError, TamperedError
from plait.events._codec import BLOB_MARK, decode_event
from plait.events._types import AnyBody, Event
from plait.events._values import UtcDateTime

__all__ = [
    "DICTIONARY_ID",
    "LEVEL",
    "Entry",
    "PackedRow",
    "chain",
    "compressed",
    "decompressed",
    "encode_entry",
    "is_packed",
    "pack",
    "unpack",
]

LEVEL = 3
"""zstd's level: as small as 19 within 5%, and 60 times faster to write
(bench/row_compression.py)."""
DICTIONARY_ID = 0x504C0001
"""The id of the dictionary plait compresses rows with (``zstd-1.dict``), in each frame's
header: a row compressed with a later one names it, and this plait refuses it by name."""


class Entry(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """An event as a row of encoding 3 holds it: what its row (stream, position) and its
    chain (previous hash, hash) do not say, every field written (``nil`` for no conversation
    or task)."""

    seq: int
    at: UtcDateTime
    v: int
    body: AnyBody
    conversation_id: str | None = None
    task_id: str | None = None


class PackedRow(msgspec.Struct, frozen=True, gc=False):
    """An append as stored: its columns beside ``data``, which holds its events."""

    seq: int
    """The seq of its last event."""
    count: int
    """How many events it holds (seqs ``seq - count + 1`` to ``seq``)."""
    prev_hash: bytes
    """The hash its first event follows (``GENESIS_HASH`` for seq 1)."""
    hash: bytes
    """Its last event's hash: the stream's head, once it is the last row."""
    data: bytes
    """The entries end to end, one zstd frame."""


_encode = msgspec.msgpack.Encoder().encode
_entries = msgspec.msgpack.Decoder(list[Entry])
_raws = msgspec.msgpack.Decoder(list[msgspec.Raw])
_ENTRY_FIELDS = Entry.__struct_fields__
_MAGIC = b"\x28\xb5\x2f\xfd"
"""How a zstd frame starts."""
_EDITED = (
    "stored bytes do not match the row's hash (edited: the bytes, or the row's stream or "
    "previous hash, which the hash binds)"
)


def encode_entry(entry: Entry) -> bytes:
    """The bytes of ``entry``, as its row holds them."""
    return _encode(entry)


def chain(stream: str) -> Callable[[bytes, bytes | memoryview], bytes]:
    """The hash of an entry of ``stream``'s, given the hash of the event before it."""
    started = hashlib.sha256(_encode(stream))

    def digest(prev: bytes, entry: bytes | memoryview) -> bytes:
        running = started.copy()  # cheaper than hashing the stream's bytes again
        running.update(prev)
        running.update(entry)
        return running.digest()

    return digest


@functools.cache
def _dictionary() -> Any:
    """The dictionary every row is compressed with, read and digested once."""
    import zstandard  # ~25 ms: imported when a store first packs or unpacks a row

    data = resources.files("plait.events").joinpath("zstd-1.dict").read_bytes()
    trained = zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_FULLDICT)
    trained.precompute_compress(level=LEVEL)
    return trained


class _Zstd(threading.local):
    """A compressor and a decompressor per thread (neither may be shared by two at once), of
    the one dictionary."""

    def __init__(self) -> None:
        import zstandard

        trained = _dictionary()
        self.error: type[Exception] = zstandard.ZstdError
        self.compress = zstandard.ZstdCompressor(
            level=LEVEL, dict_data=trained, write_content_size=True, write_checksum=False
        ).compress
        self.decompress = zstandard.ZstdDecompressor(dict_data=trained).decompress


_zstd: _Zstd | None = None


def _codec() -> _Zstd:
    global _zstd
    if _zstd is None:
        _zstd = _Zstd()
    return _zstd


def compressed(data: bytes) -> bytes:
    """``data`` as one zstd frame, with the row's dictionary (what a store compresses beside
    its rows: SQLite's small content)."""
    return _codec().compress(data)


def decompressed(data: bytes) -> bytes:
    """What ``compressed`` made of ``data``; raise ``ValueError`` if it is not such a frame."""
    zstd = _codec()
    try:
        return zstd.decompress(data)
    except zstd.error as exc:
        raise ValueError(str(exc)) from None


def is_packed(data: bytes | memoryview) -> bool:
    """Whether stored bytes are a row of encoding 3 (a zstd frame), not one event of an earlier
    encoding (a msgpack map or array)."""
    return data[:4] == _MAGIC


def pack(seq: int, prev_hash: bytes, entries: list[bytes], last_hash: bytes) -> PackedRow:
    """The row of an append whose entries (hashed by ``chain``, the last to ``last_hash``)
    follow ``prev_hash`` and end at ``seq``."""
    data = _codec().compress(b"".join(entries))
    return PackedRow(seq, len(entries), prev_hash, last_hash, data)


def unpack(
    stream: str,
    position: int,
    row: PackedRow,
    *,
    check: bool = True,
    digest: Callable[[bytes, bytes | memoryview], bytes] | None = None,
    resolve: Callable[[Event], Event] | None = None,
) -> list[Event]:
    """The events of ``row`` of ``stream``, the first at ``position``: each checked against
    the row's chain (the hash its first follows, its last's hash) and its columns
    (``TamperedError``), unless not ``check``; errors name the stream and the seq.
    ``resolve`` is applied to each whose body may name a blob."""
    seq, count, prev = row.seq, row.count, row.prev_hash
    if not 0 < count < 1 << 32:
        raise TamperedError(stream, seq, f"the row's count is {count}, no count of events (edited)")
    first = seq - count + 1
    zstd = _codec()
    try:
        plain = zstd.decompress(row.data)
    except zstd.error as exc:
        why = f"cannot decompress the row (damaged, or of a newer plait's dictionary): {exc}"
        raise CorruptEventError(stream, first, why) from exc
    joined = b"".join((b"\xdd", count.to_bytes(4, "big"), plain))
    try:
        raws = _raws.decode(joined)
    except msgspec.DecodeError as exc:
        why = f"the row's data is not the {count} events its count says (edited): {exc}"
        raise TamperedError(stream, first, why) from exc
    hashes: list[bytes] = []
    digest = digest or chain(stream)
    for raw in raws:
        prev = digest(prev, raw)
        hashes.append(prev)
    if check and prev != row.hash:
        raise TamperedError(stream, first, _EDITED)
    try:
        entries: list[Entry] | None = _entries.decode(joined)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        entries = None  # an older body version, or worse: the careful path says which
    events: list[Event] = []
    prev = row.prev_hash
    for index, digest_of in enumerate(hashes):
        expected = first + index
        if entries is not None and entries[index].v == entries[index].body.VERSION:
            e = entries[index]
            event = Event(
                stream, e.seq, e.at, e.v, e.body, prev, e.conversation_id, e.task_id,
                position + index, digest_of,
            )  # fmt: skip
        else:
            event = _careful(bytes(raws[index]), stream, expected, prev, position + index)
            msgspec.structs.force_setattr(event, "hash", digest_of)
        if check and event.seq != expected:
            why = f"its row places it at seq {expected}, its bytes at {event.seq} (edited)"
            raise TamperedError(stream, expected, why)
        events.append(event)
        prev = digest_of
    if resolve is not None and BLOB_MARK in plain:
        events = [resolve(e) if e.body.BLOB_FIELDS else e for e in events]
    return events


def _careful(data: bytes, stream: str, seq: int, prev: bytes, position: int) -> Event:
    """An entry that is not of the current versions, decoded field by field and upcast."""
    try:
        fields = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # text that is not UTF-8
        raise CorruptEventError(stream, seq, f"cannot decode the stored event: {exc}") from exc
    if not isinstance(fields, list) or not 4 <= len(fields) <= len(_ENTRY_FIELDS):
        raise CorruptEventError(stream, seq, "stored event is not an entry of encoding 3")
    raw: dict[str, Any] = dict(zip(_ENTRY_FIELDS, fields, strict=False))
    if not isinstance(raw.get("body"), dict) or not isinstance(raw.get("v"), int):
        raise CorruptEventError(stream, seq, "stored event is not an entry of encoding 3")
    raw.update(stream=stream, prev_hash=prev)
    return decode_event(raw, stream=stream, seq=raw.get("seq", seq), position=position)
