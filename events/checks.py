"""What every read checks, and what ``verify`` checks besides (docs/event-log.md#checked-reads).

Every read checks each row's bytes against its hash (``decode_rows``, ``decode_joined``) and
each event's link to the one before it in its stream (``link``, ``Links``), and stops with a
``TamperedError`` naming stream and seq: nothing shown, folded or replayed is what the log
cannot vouch for. ``verify`` walks a whole stream besides: every row decodes, its columns
say what its bytes say, its blobs are there and unedited, the stream's head is its last event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from plait.errors import CorruptEventError, TamperedError
from plait.events.blobs import blob_refs
from plait.events.codec import GENESIS_HASH, decode_event, event_hash
from plait.events.types import Event

if TYPE_CHECKING:
    from plait.events.store import EventStore

__all__ = ["Links", "Verification", "link", "verify"]

BROKEN = "prev_hash does not match the event before it (chain broken)"
"""Why an event that does not link to the one before it is refused."""


def link(stream: str, events: Sequence[Event], previous: bytes) -> None:
    """Check that ``events``, consecutive in ``stream``, each link to the one before, the
    first to the event of hash ``previous``."""
    for event in events:
        if event.prev_hash != previous:
            raise TamperedError(stream, event.seq, BROKEN)
        previous = event.hash


class Links:
    """The last event seen of each stream in a read across streams (global order), so that
    each next one is checked against it; a stream's first event links to the genesis hash."""

    def __init__(self) -> None:
        self._last: dict[str, Event] = {}

    def check(self, events: Iterable[Event]) -> None:
        """Check ``events`` (in global order) against what came before them in this read."""
        last = self._last
        get = last.get
        for event in events:
            before = get(event.stream)
            if before is not None:
                if event.prev_hash != before.hash or event.seq != before.seq + 1:
                    self._refuse(event, before)
            elif event.seq == 1 and event.prev_hash != GENESIS_HASH:
                raise TamperedError(event.stream, 1, BROKEN)
            last[event.stream] = event

    @staticmethod
    def _refuse(event: Event, before: Event) -> None:
        if event.seq != before.seq + 1:
            missing = f"event missing (next is {event.seq})"
            raise CorruptEventError(event.stream, before.seq + 1, missing)
        raise TamperedError(event.stream, event.seq, BROKEN)


class Verification(msgspec.Struct, frozen=True):
    """What ``verify`` found walking a stream's hash chain and blob references."""

    stream: str
    """The stream walked."""
    ok: bool
    """True when nothing was found edited, missing or out of place."""
    events: int
    """Events checked."""
    first_bad_seq: int | None = None
    """The first seq where a check failed."""
    reason: str = ""
    """What failed there, for people."""
    blobs: int = 0
    """Blob references checked."""
    redacted: int = 0
    """Blob references whose content was deliberately deleted (not an error)."""


def verify(store: EventStore, stream: str) -> Verification:
    """Walk ``stream``'s rows: hash, chain, columns, blobs and head."""
    from plait.events.store import REDACTED

    previous = GENESIS_HASH
    seq = 0
    blobs = redacted = 0

    def bad(at: int, reason: str) -> Verification:
        return Verification(stream, False, seq, at, reason, blobs, redacted)

    for position, data, digest, columns in store._envelopes(stream):
        seq += 1
        if event_hash(data) != digest:
            return bad(seq, "stored bytes do not match their hash (edited)")
        try:
            event = decode_event(data, stream=stream, seq=seq, position=position, hash=digest)
        except CorruptEventError as exc:
            return bad(seq, exc.reason)
        stored = msgspec.msgpack.decode(data)  # as written: the columns say its version
        said = (stored.get("seq"), stored["body"].get("type"), stored.get("v"))
        if columns != said:
            return bad(seq, f"the row's columns say {columns}, its bytes {said} (edited)")
        if event.prev_hash != previous:
            return bad(seq, BROKEN)
        for ref in blob_refs(event.body):
            blobs += 1
            found = store._blob(ref.sha256)
            if found is REDACTED:
                redacted += 1
            elif not isinstance(found, bytes):
                return bad(seq, f"blob sha256:{ref.sha256} is missing")
            elif hashlib.sha256(found).hexdigest() != ref.sha256:
                return bad(seq, f"blob sha256:{ref.sha256} content was edited")
        previous = digest
    head_seq, head_hash = store._head(stream)
    if head_seq != seq:
        return bad(seq + 1, f"the stream head says seq {head_seq}, the log ends at {seq}")
    if seq and head_hash != previous:
        return bad(seq, "the stream head's hash does not match the last event")
    return Verification(stream, True, seq, None, "", blobs, redacted)
