"""Bytes in and out: msgpack for storage, JSON Lines for export, upcasters for old versions.

Two encodings of the stored bytes are read (docs/event-log.md#encoding); this plait writes the
second. Encoding 1 is the msgpack map of the ``Event`` without ``position`` and ``hash``, and
``hash = sha256(stored bytes)``. Encoding 2 is the msgpack array of the ``Event``'s fields in
order, its stream left empty (the row holds it), its position and hash empty too; its hash is
``sha256(msgpack(stream) + stored bytes)``, which binds the stream as encoding 1's bytes did. A
map starts with a byte ``0x8_``, a short array with ``0x9_``: the first byte says which. Each
event carries the previous event's hash, which makes a chain per stream. Reading the current
version of a body is one typed decode; older versions go through the upcaster registry, one
version step at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

import msgspec

from plait._errors import CorruptEventError, TamperedError, UnknownEventTypeError
from plait.events._types import AnyBody, Body, Event
from plait.events._upcasters import STEPS
from plait.events._values import UtcDateTime

__all__ = [
    "BLOB_MARK",
    "CURRENT_VERSIONS",
    "GENESIS_HASH",
    "UPCASTERS",
    "Upcasters",
    "decode_event",
    "decode_joined",
    "decode_rows",
    "encode_event",
    "event_hash",
    "from_jsonl",
    "is_compact",
    "to_jsonl",
]

GENESIS_HASH = bytes(32)
"""``prev_hash`` of the first event of every stream."""


def _body_types() -> dict[str, type[Body]]:
    found: dict[str, type[Body]] = {}
    for cls in AnyBody.__args__:
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        found[tag] = cls
    return found


BODY_TYPES = _body_types()
BODY_TAGS: dict[type[Body], str] = {cls: name for name, cls in BODY_TYPES.items()}
"""Body type → its tag, the type name stored beside each event."""
CURRENT_VERSIONS: dict[str, int] = {name: cls.VERSION for name, cls in BODY_TYPES.items()}
"""Body type name → the version this plait writes."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """Functions that lift a body, as a plain dict, from one version to the next.

    ``register("ToolCallCompleted", 1)`` decorates ``upcast_v1_v2(body) -> body``. Old logs are
    read through these and never rewritten.
    """

    def __init__(
        self,
        current: dict[str, int] | None = None,
        steps: dict[tuple[str, int], Upcaster] | None = None,
    ) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = dict(steps or {})
        self.current = dict(CURRENT_VERSIONS if current is None else current)

    def register(self, type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Register ``fn`` to lift ``type_name`` from ``from_version`` to the next version."""

        def deco(fn: Upcaster) -> Upcaster:
            self._steps[(type_name, from_version)] = fn
            return fn

        return deco

    def upcast(
        self, body: dict[str, Any], version: int, stream: str, seq: int | None
    ) -> tuple[dict[str, Any], int]:
        """Lift ``body`` to the current version of its type; return it and that version."""
        type_name = str(body.get("type"))
        while self.current.get(type_name) != version:
            step = self._steps.get((type_name, version))
            if step is None:
                raise UnknownEventTypeError(stream, seq, type_name, version)
            body = step(body)
            version += 1
            type_name = str(body.get("type"))
        return body, version


UPCASTERS = Upcasters(steps=STEPS)
"""The registry plait reads its own logs with (``events/_upcasters.py``)."""


class EventMap(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """An ``Event`` as a map of its fields (the same, in the same order): how JSON Lines and
    encoding 1 hold it."""

    stream: str
    seq: int
    at: UtcDateTime
    v: int
    body: AnyBody
    prev_hash: bytes
    conversation_id: str | None = None
    task_id: str | None = None
    position: int = 0
    hash: bytes = b""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Event)
_many_decoder = msgspec.msgpack.Decoder(list[Event])
_map_decoder = msgspec.msgpack.Decoder(EventMap)
_many_map_decoder = msgspec.msgpack.Decoder(list[EventMap])
_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder(EventMap)
_set = msgspec.structs.force_setattr
_fields = msgspec.structs.astuple
_EVENT_FIELDS = Event.__struct_fields__


def as_map(event: Event) -> EventMap:
    """``event`` as an ``EventMap``."""
    return EventMap(*_fields(event))


def from_map(record: EventMap) -> Event:
    """The ``Event`` of an ``EventMap``."""
    return Event(*_fields(record))


def encode_event(event: Event, encoding: int = 2) -> bytes:
    """Return the stored bytes of ``event``: encoding 2's (its stream, position and hash are
    not part of them), or, with ``encoding=1``, an earlier plait's (what tests write to make a
    store as it left them)."""
    if encoding == 1:
        return _encoder.encode(EventMap(*_fields(event)[:8]))  # all but position and hash
    if event.stream or event.position or event.hash:
        event = Event("", *_fields(event)[1:8])
    return _encoder.encode(event)


def is_compact(data: bytes | memoryview) -> bool:
    """Whether stored bytes are of encoding 2 (a msgpack array) rather than 1 (a map)."""
    return len(data) > 0 and data[0] >> 4 == 9


def event_hash(stream: str, data: bytes | memoryview) -> bytes:
    """Return the chain hash of an event's stored bytes, the event being of ``stream``."""
    if is_compact(data):
        return hasher(stream)(data)
    return hashlib.sha256(data).digest()


def hasher(stream: str) -> Callable[[bytes | memoryview], bytes]:
    """The chain hash of stored bytes of encoding 2 of ``stream``'s events (an append's)."""
    started = hashlib.sha256(_encoder.encode(stream))

    def digest(data: bytes | memoryview) -> bytes:
        running = started.copy()  # cheaper than hashing the stream's bytes again
        running.update(data)
        return running.digest()

    return digest


# How a ``BlobRef`` starts in msgpack. A row without these bytes holds no blob reference, so
# reading it skips the walk over its blob fields (a false positive only costs that walk).
BLOB_MARK = b"\xa4kind\xa4blob"


def decode_rows(
    rows: Iterable[tuple[int, bytes, bytes, str, int, str, int]],
    resolve: Callable[[Event], Event] | None = None,
    *,
    check: bool = True,
) -> list[Event]:
    """Decode stored rows ``(position, data, hash, stream, seq, type, v)``, each an event of
    encoding 1 or 2 (``plait.events._rows``).

    Each row's bytes are checked against its hash, and its columns against what its bytes
    say (``TamperedError``), unless not ``check`` (``plait log --unverified``). Encoding 2's
    bytes leave the stream to the row, and its hash binds it.

    A row of the current version is one typed decode. Anything else takes the careful path
    of ``decode_event``, whose errors name the stream and seq the row's columns give.
    ``resolve`` is applied to events whose bytes may hold a blob reference.
    """
    out: list[Event] = []
    append = out.append
    decode, decode_map = _decoder.decode, _map_decoder.decode
    set_ = _set
    mark = BLOB_MARK
    sha256 = hashlib.sha256
    hashers: dict[str, Callable[[bytes], bytes]] = {}  # encoding 2's, by stream
    tags = BODY_TAGS
    said: tuple[object, ...]  # stream, seq, type and v, as the bytes say them
    for position, data, digest, stream, seq, type_name, v in rows:
        compact = len(data) > 0 and data[0] >> 4 == 9
        if check:
            if compact:
                digest_of = hashers.get(stream) or hashers.setdefault(stream, hasher(stream))
                found = digest_of(data)
            else:
                found = sha256(data).digest()
            if found != digest:
                raise TamperedError(stream, seq, _EDITED_COMPACT if compact else _EDITED)
        event: Event | None = None
        try:
            if compact:
                event = decode(data)
                if event.stream:  # a stream in the bytes: not this plait's (careful path)
                    event = None
                else:
                    set_(event, "stream", stream)
            else:
                event = from_map(decode_map(data))
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            event = None
        if event is not None and event.v == event.body.VERSION:
            set_(event, "position", position)
            set_(event, "hash", digest)
            said = (event.stream, event.seq, tags[type(event.body)], event.v)
        else:
            raw = _stored(data, stream, seq)  # as written: an upcaster may change its type
            said = (raw.get("stream"), raw.get("seq"), raw["body"].get("type"), raw["v"])
            event = decode_event(raw, stream=stream, seq=seq, position=position, hash=digest)
        if check and said != (stream, seq, type_name, v):
            reason = _disagree((stream, seq, type_name, v), said)
            raise TamperedError(event.stream, event.seq, reason)
        if resolve is not None and event.body.BLOB_FIELDS and mark in data:
            event = resolve(event)
        append(event)
    return out


_EDITED = "stored bytes do not match their hash (edited)"
_EDITED_COMPACT = (
    "stored bytes do not match their hash (edited: the bytes, or the row's stream, which the "
    "hash binds)"
)


def _disagree(columns: tuple[object, ...], said: tuple[object, ...]) -> str:
    """Which of a row's columns do not say what its bytes say."""
    names = ("stream", "seq", "type", "v")
    found = [
        f"{name} column says {column!r}, its bytes {byte!r}"
        for name, column, byte in zip(names, columns, said, strict=True)
        if column != byte
    ]
    return f"the row's {'; '.join(found)} (edited)"


def decode_joined(
    data: bytes | memoryview,
    positions: list[int],
    hashes: bytes,
    ends: list[int],
    streams: list[str],
) -> list[Event] | None:
    """Decode the stored bytes of ``len(positions)`` events of the current versions laid end
    to end, and give them their positions and their hashes (32 bytes each, end to end): the
    fast path of a rebuild, which checked the versions beforehand.

    ``ends`` (each event's end offset in ``data``, after a 0) cut the bytes, each checked
    against its hash; ``streams`` are the rows' (encoding 2 leaves the stream to the row).
    Return ``None`` when one does not match, the events are not all of one encoding, or they
    do not decode as current events (the careful path of ``decode_rows`` then says which and
    why).
    """
    count = len(positions)
    if len(hashes) != 32 * count or not count:
        return None
    sha256 = hashlib.sha256
    cuts = list(pairwise(ends))
    # All of one encoding, as the first says: else a digest does not match (careful path).
    compact = is_compact(data[: cuts[0][1]])
    if compact:
        hashers = {stream: hasher(stream) for stream in set(streams)}
        digests = [hashers[s](data[a:b]) for (a, b), s in zip(cuts, streams, strict=True)]
    else:
        digests = [sha256(data[a:b]).digest() for a, b in cuts]
    if b"".join(digests) != hashes:
        return None  # the careful path names the row
    # One msgpack array (a 32-bit length, then the events) decodes in one call.
    joined = b"".join((b"\xdd", count.to_bytes(4, "big"), data))
    try:
        if compact:
            events = _many_decoder.decode(joined)
        else:
            events = [from_map(record) for record in _many_map_decoder.decode(joined)]
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    set_ = _set
    for event, stream, position, digest in zip(events, streams, positions, digests, strict=True):
        if compact:
            if event.stream:
                return None
            set_(event, "stream", stream)
        set_(event, "position", position)
        set_(event, "hash", digest)
    return events


def decode_event(
    data: bytes | dict[str, Any],
    *,
    stream: str,
    seq: int,
    position: int = 0,
    hash: bytes = b"",
    upcasters: Upcasters = UPCASTERS,
) -> Event:
    """Decode one event's stored bytes (or what ``_stored`` made of them), lifting old
    versions; errors name ``stream`` and ``seq`` (where the event is supposed to be), and so
    does a row that holds some other event."""
    raw = _stored(data, stream, seq) if isinstance(data, bytes) else data
    body, version = upcasters.upcast(raw["body"], raw["v"], stream, seq)
    try:
        event = from_map(msgspec.convert({**raw, "body": body, "v": version}, EventMap))
    except msgspec.ValidationError as exc:
        raise CorruptEventError(stream, seq, f"stored event does not fit its type: {exc}") from exc
    if event.stream != stream or event.seq != seq:
        raise CorruptEventError(
            stream, seq, f"row holds the event of stream {event.stream} seq {event.seq}"
        )
    _set(event, "position", position)
    _set(event, "hash", hash)
    return event


def _stored(data: bytes, stream: str, seq: int) -> dict[str, Any]:
    """The stored bytes as plain msgpack, which must be an event record (with a version):
    encoding 1's map, or encoding 2's array made one, with the row's stream."""
    try:
        raw = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # text that is not UTF-8
        raise CorruptEventError(stream, seq, f"cannot decode the stored event: {exc}") from exc
    if isinstance(raw, list) and len(raw) == len(_EVENT_FIELDS):
        raw = dict(zip(_EVENT_FIELDS, raw, strict=True))
        raw["stream"] = raw["stream"] or stream
        raw.pop("position")
        raw.pop("hash")
    if not isinstance(raw, dict) or not isinstance(raw.get("body"), dict):
        raise CorruptEventError(stream, seq, "stored event is not an event record")
    if not isinstance(raw.get("v"), int):
        raise CorruptEventError(stream, seq, "stored event has no body version `v`")
    return raw


def to_jsonl(events: Iterable[Event]) -> Iterator[bytes]:
    """Yield one JSON line (with its newline) per event, hash and position included."""
    for event in events:
        yield _json_encoder.encode(as_map(event)) + b"\n"


def from_jsonl(
    lines: Iterable[bytes | str], *, source: str = "<jsonl>", upcasters: Upcasters = UPCASTERS
) -> Iterator[Event]:
    """Parse JSON Lines written by ``to_jsonl`` (any plait version); errors name line and seq."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {lineno}"
        try:
            raw = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise CorruptEventError(where, None, f"not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise CorruptEventError(where, None, "a line must hold one JSON object")
        seq = raw.get("seq") if isinstance(raw.get("seq"), int) else None
        body = raw.get("body")
        type_name = str(body.get("type")) if isinstance(body, dict) else "?"
        version = raw.get("v")
        if not isinstance(version, int):
            raise CorruptEventError(where, seq, "missing the body version `v`")
        try:
            if upcasters.current.get(type_name) == version:
                yield from_map(_json_decoder.decode(line))
            else:
                body, version = upcasters.upcast(dict(body or {}), version, where, seq)
                lifted = _json_encoder.encode({**raw, "body": body, "v": version})
                yield from_map(_json_decoder.decode(lifted))
        except msgspec.ValidationError as exc:
            raise CorruptEventError(where, seq, f"not a valid event: {exc}") from exc
