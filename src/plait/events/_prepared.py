"""``PreparedAppend``: an append encoded and chained, before any backend writes it.

A store prepares an append inside its write transaction, after reading the stream's head. A
stream's only writer (a session's journal) knows the head already: it prepares the append
itself, folds the events at once, and has them written after (``EventStore.append_prepared``),
so what it does next need not wait for the fsync (docs/event-log.md#writing-ahead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

import msgspec

from plait._errors import CorruptEventError, TransientEventError
from plait.events._blobs import externalize
from plait.events._codec import BODY_TAGS
from plait.events._packing import Entry, PackedRow, chain, encode_entry, pack
from plait.events._types import Body, Event, NewEvent, Transient

__all__ = ["PreparedAppend", "draft", "encode"]


class PreparedAppend(NamedTuple):
    """An append encoded and chained, ready for the backend to write in one transaction."""

    rows: list[tuple[int, str, int, bytes, bytes]]
    """``(seq, type, v, data, hash)`` per event."""
    events: list[Event]
    """The events as the caller will see them (position filled in after the write)."""
    blobs: dict[str, bytes]
    """Blob content by hex sha-256."""

    def placed(self, first_position: int) -> list[Event]:
        """Return the events, numbered from ``first_position`` in global order."""
        for offset, event in enumerate(self.events):
            msgspec.structs.force_setattr(event, "position", first_position + offset)
        return self.events

    def packed(self) -> PackedRow:
        """The append as its row keeps it (encoding 3): its entries compressed together, after
        the hash its first event follows, up to its last event's."""
        last = self.rows[-1]
        return pack(last[0], self.events[0].prev_hash, [row[3] for row in self.rows], last[4])

    @staticmethod
    def joined(appends: Sequence[PreparedAppend]) -> PreparedAppend:
        """``appends`` of one stream, each following the one before, as one append."""
        if len(appends) == 1:
            return appends[0]
        blobs: dict[str, bytes] = {}
        for append in appends:
            blobs.update(append.blobs)
        rows = [row for append in appends for row in append.rows]
        return PreparedAppend(rows, [e for append in appends for e in append.events], blobs)


def draft(stream: str, item: Body | NewEvent) -> NewEvent:
    """``item`` as an event to append to ``stream``; a transient notification or anything but
    an event body is refused (``TransientEventError``)."""
    if type(item) is NewEvent and isinstance(item.body, Body):
        return item
    if isinstance(item, NewEvent):
        made = item
    elif isinstance(item, Body):
        made = NewEvent(item)
    else:
        what = "transient notification" if isinstance(item, Transient) else "non-event"
        raise TransientEventError(
            f"stream {stream}: a {what} ({type(item).__name__}) cannot be stored"
        )
    if isinstance(made.body, Transient) or not isinstance(made.body, Body):
        raise TransientEventError(
            f"stream {stream}: {type(made.body).__name__} is not a persisted event body"
        )
    return made


def encode(
    stream: str,
    drafts: list[NewEvent],
    head_seq: int,
    head_hash: bytes,
    now: datetime,
    blob_threshold: int,
    scope: Callable[[str], bytes],
) -> PreparedAppend:
    """``drafts`` encoded and chained to follow seq ``head_seq`` of ``stream``, of hash
    ``head_hash``: those without a time stamped ``now`` (UTC), their large strings moved to
    blobs (past ``blob_threshold`` bytes; those to be deletable alone by their ``scope``)."""
    rows: list[tuple[int, str, int, bytes, bytes]] = []
    out: list[Event] = []
    blobs: dict[str, bytes] = {}
    prev = head_hash
    threshold = blob_threshold
    set_ = msgspec.structs.force_setattr
    tags = BODY_TAGS
    link = chain(stream)  # an append's events are one row (docs/event-log.md#encoding-3)
    seq = head_seq
    for new in drafts:
        seq += 1
        at = new.at
        if at is None:
            at = now
        elif at.tzinfo is not UTC:
            if at.tzinfo is None:
                raise CorruptEventError(stream, seq, "event time must be timezone-aware (UTC)")
            at = at.astimezone(UTC)
        body = new.body
        cls = type(body)
        version = cls.VERSION
        event = Event(
            stream,
            seq,
            at,
            version,
            body,  # type: ignore[arg-type]
            prev,
            new.conversation_id,
            new.task_id,
        )
        stored = body
        if cls.BLOB_FIELDS:
            # Large strings leave the event before it is encoded: encoding them inline
            # first would copy a 50 MB prompt once more (bench/memory.py).
            if new.scoped_blobs:
                stored = externalize(body, 0, blobs, scope(f"{stream}:{seq}"))
            elif new.session_blobs:
                stored = externalize(body, 0, blobs, scope(stream))
            else:
                stored = externalize(body, threshold, blobs)
        conversation, task = new.conversation_id, new.task_id
        data = encode_entry(Entry(seq, at, version, stored, conversation, task))  # type: ignore[arg-type]
        prev = link(prev, data)
        rows.append((seq, tags[cls], version, data, prev))
        set_(event, "hash", prev)
        out.append(event)
    return PreparedAppend(rows, out, blobs)
