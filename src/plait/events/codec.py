"""Bytes in and out: msgpack for storage, JSON Lines for export, upcasters for old versions.

The stored bytes of an event are the msgpack of its ``Event`` without ``position`` and ``hash``;
``hash = sha256(stored bytes)`` and each event carries the previous event's hash, which makes a
chain per stream. Reading the current version of a body is one typed decode; older versions go
through the upcaster registry, one version step at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any

import msgspec

from plait.errors import CorruptEventError, TamperedError, UnknownEventTypeError
from plait.events.types import AnyBody, Body, Event
from plait.events.upcasters import STEPS

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
"""The registry plait reads its own logs with (``events/upcasters.py``)."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Event)
_many_decoder = msgspec.msgpack.Decoder(list[Event])
_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder(Event)
_set = msgspec.structs.force_setattr


def encode_event(event: Event) -> bytes:
    """Return the stored bytes of ``event`` (position and hash are never part of them)."""
    if event.position or event.hash:
        event = msgspec.structs.replace(event, position=0, hash=b"")
    return _encoder.encode(event)


def event_hash(data: bytes) -> bytes:
    """Return the chain hash of an event's stored bytes."""
    return hashlib.sha256(data).digest()


# How a ``BlobRef`` starts in msgpack. A row without these bytes holds no blob reference, so
# reading it skips the walk over its blob fields (a false positive only costs that walk).
BLOB_MARK = b"\xa4kind\xa4blob"


def decode_rows(
    rows: Iterable[tuple[int, bytes, bytes, str, int, str, int]],
    resolve: Callable[[Event], Event] | None = None,
    *,
    check: bool = True,
) -> list[Event]:
    """Decode stored rows ``(position, data, hash, stream, seq, type, v)``; the hot path of
    every read.

    Each row's bytes are checked against its hash, and its columns against what its bytes
    say (``TamperedError``), unless not ``check`` (``plait log --unverified``).

    The stored bytes carry everything (stream, seq, type, version), so a row of the current
    version is one typed decode. Anything else takes the careful path of ``decode_event``,
    whose errors name the stream and seq the row's columns give. ``resolve`` is applied to
    events whose bytes may hold a blob reference.
    """
    out: list[Event] = []
    append = out.append
    decode = _decoder.decode
    set_ = _set
    mark = BLOB_MARK
    sha256 = hashlib.sha256
    tags = BODY_TAGS
    said: tuple[object, ...]  # stream, seq, type and v, as the bytes say them
    for position, data, digest, stream, seq, type_name, v in rows:
        if check and sha256(data).digest() != digest:
            raise TamperedError(stream, seq, "stored bytes do not match their hash (edited)")
        try:
            event: Event | None = decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
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
    data: bytes | memoryview, positions: list[int], hashes: bytes, ends: list[int]
) -> list[Event] | None:
    """Decode the stored bytes of ``len(positions)`` events of the current versions laid end
    to end, and give them their positions and their hashes (32 bytes each, end to end): the
    fast path of a rebuild, which checked the versions beforehand.

    ``ends`` (each event's end offset in ``data``, after a 0) cut the bytes, each checked
    against its hash. Return ``None`` when one does not match, or they do not decode as
    current ``Event``s (the careful path of ``decode_rows`` then says which and why).
    """
    count = len(positions)
    if len(hashes) != 32 * count:
        return None
    sha256 = hashlib.sha256
    digests = [sha256(data[a:b]).digest() for a, b in pairwise(ends)]
    if b"".join(digests) != hashes:
        return None  # the careful path names the row
    try:
        # One msgpack array (a 32-bit length, then the events) decodes in one call.
        events = _many_decoder.decode(b"".join((b"\xdd", count.to_bytes(4, "big"), data)))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if len(events) != count:
        return None
    set_ = _set
    for event, position, digest in zip(events, positions, digests, strict=True):
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
    """Decode one event's stored bytes (or what ``msgpack`` made of them), lifting old
    versions; errors name ``stream`` and ``seq`` (where the event is supposed to be), and so
    does a row that holds some other event."""
    raw = _stored(data, stream, seq) if isinstance(data, bytes) else data
    body, version = upcasters.upcast(raw["body"], raw["v"], stream, seq)
    try:
        event = msgspec.convert({**raw, "body": body, "v": version}, Event)
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
    """The stored bytes as plain msgpack, which must be an event record (with a version)."""
    try:
        raw = msgspec.msgpack.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptEventError(stream, seq, f"cannot decode the stored event: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("body"), dict):
        raise CorruptEventError(stream, seq, "stored event is not an event record")
    if not isinstance(raw.get("v"), int):
        raise CorruptEventError(stream, seq, "stored event has no body version `v`")
    return raw


def to_jsonl(events: Iterable[Event]) -> Iterator[bytes]:
    """Yield one JSON line (with its newline) per event, hash and position included."""
    for event in events:
        yield _json_encoder.encode(event) + b"\n"


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
                yield _json_decoder.decode(line)
            else:
                body, version = upcasters.upcast(dict(body or {}), version, where, seq)
                lifted = _json_encoder.encode({**raw, "body": body, "v": version})
                yield _json_decoder.decode(lifted)
        except msgspec.ValidationError as exc:
            raise CorruptEventError(where, seq, f"not a valid event: {exc}") from exc
