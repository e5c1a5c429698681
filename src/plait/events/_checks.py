"""What every read checks, and what ``verify`` checks besides (docs/event-log.md#checked-reads).

Every read checks each row's bytes against its hash and its columns against its bytes
(``decode_rows``; ``decode_joined`` and ``columns_agree`` on a rebuild's fast path), each
event's link to the one before it in its stream (``link``, ``Links``) and, across streams, that
positions run without a gap; it stops with a ``TamperedError`` naming stream and seq: nothing
shown, folded or replayed is what the log cannot vouch for. ``verify`` walks a whole stream
besides: its blobs are there and unedited (a deleted one only where its conversation's storage
policy lets its content expire), the stream's head is its last event.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

import msgspec

from plait._errors import CorruptEventError, TamperedError
from plait.events._blobs import blob_refs
from plait.events._codec import BODY_TYPES, GENESIS_HASH
from plait.events._types import ContentErased, ConversationOpened, Event
from plait.events._verification import Verification

if TYPE_CHECKING:
    from plait.events._blobstore import RedactedMarker
    from plait.events._proof import Proof

__all__ = [
    "Columns",
    "Links",
    "Placed",
    "Verification",
    "columns_agree",
    "first_gap",
    "link",
    "misplaced",
    "position_gap",
    "position_gaps",
    "verify",
]

BROKEN = "prev_hash does not match the event before it (chain broken)"
"""Why an event that does not link to the one before it is refused."""


def link(stream: str, events: Sequence[Event], previous: bytes) -> None:
    """Check that ``events``, consecutive in ``stream``, each link to the one before, the
    first to the event of hash ``previous``."""
    for event in events:
        if event.prev_hash != previous:
            raise TamperedError(stream, event.seq, BROKEN)
        previous = event.hash


def misplaced(event: Event, stream: str, seq: int) -> str | None:
    """Why ``event``, read where seq ``seq`` of ``stream`` should be, is not it (if it is not)."""
    if event.stream != stream:
        return f"row holds the event of stream {event.stream} seq {event.seq}"
    return None if event.seq == seq else f"event missing (next stored is {event.seq})"


Placed = tuple[int, str, int]
"""Where a row's event is: its position, stream and seq."""


def first_gap(read: Callable[[int, int], list[Placed]]) -> tuple[int, int] | None:
    """The first place where positions are not dense from 1, reading where events are with
    ``read(after, limit)``: the position before it (0: none) and the next one stored."""
    return next(position_gaps(read), None)


def position_gaps(read: Callable[[int, int], list[Placed]]) -> Iterator[tuple[int, int]]:
    """Every place where positions are not dense from 1, as ``first_gap`` gives the first."""
    after = 0
    while found := read(after, 10_000):
        for position, _, _ in found:
            if position != after + 1:
                yield after, position
            after = position


def position_gap(report: Verification, before: int, after: Placed) -> Verification:
    """``report`` of a stream found good, made to say that positions jump from ``before``
    (0: none) to the one of ``after``, the first event after it: one line naming the gap and
    that event (at its seq, if it is of the stream verified)."""
    position, stream, seq = after
    jump = f"jump from {before} to {position}" if before else f"start at {position}"
    gone = f"{before + 1}" if position == before + 2 else f"{before + 1} to {position - 1}"
    reason = (
        f"positions {jump} (stream {stream} seq {seq}): {gone} missing; positions are "
        "dense from 1, so a row moved or was lost"
    )
    at = seq if stream == report.stream else None
    return msgspec.structs.replace(report, ok=False, first_bad_seq=at, reason=reason)


Columns = tuple[list[str], list[int], list[str], list[int]]
"""The ``stream``, ``seq``, ``type`` and ``v`` columns of consecutive rows, a list each."""


def columns_agree(events: list[Event], columns: Columns) -> bool:
    """Whether the rows' ``columns`` say what ``events``, decoded from their bytes, say (a
    rebuild's fast path; ``decode_rows`` then names the row that does not)."""
    streams, seqs, types, versions = columns
    return (
        seqs == list(map(_seq, events))
        and versions == list(map(_v, events))
        and streams == list(map(_stream, events))
        and list(map(BODY_TYPES.get, types)) == list(map(type, map(_body, events)))
    )


_seq, _v, _stream, _body = map(attrgetter, ("seq", "v", "stream", "body"))


class Links:
    """The last event seen of each stream in a read across streams (global order), so that
    each next one is checked against it; a stream's first event links to the genesis hash.
    Where positions are dense (docs/event-log.md#streams-seq-and-position), the read's first
    event is at ``after_position + 1`` and each next one right after the one before, but where
    ``pruned(first, last)`` says a prune accounts for the positions skipped
    (docs/storage.md#retention); where they are not (``dense=False``: PostgreSQL), each is
    after the one before."""

    def __init__(
        self,
        after_position: int = 0,
        pruned: Callable[[int, int], bool] | None = None,
        *,
        dense: bool = True,
    ) -> None:
        self._last: dict[str, Event] = {}
        self._position = after_position
        self._pruned = pruned
        self._dense = dense

    def check(self, events: Iterable[Event]) -> None:
        """Check ``events`` (in global order) against what came before them in this read."""
        last = self._last
        get = last.get
        position = self._position
        for event in events:
            position += 1
            if event.position != position:
                self._jumped(event, position)
                position = event.position  # past what a prune removed, or a gap allowed
            before = get(event.stream)
            if before is not None:
                if event.prev_hash != before.hash or event.seq != before.seq + 1:
                    self._refuse(event, before)
            elif event.seq == 1 and event.prev_hash != GENESIS_HASH:
                raise TamperedError(event.stream, 1, BROKEN)
            last[event.stream] = event
        self._position = position

    def _jumped(self, event: Event, expected: int) -> None:
        """Refuse ``event``, found where position ``expected`` was next, unless it is past it
        and positions are not dense, or a prune accounts for those it skipped."""
        if event.position > expected and (
            not self._dense
            or (self._pruned is not None and self._pruned(expected, event.position - 1))
        ):
            return
        where = (
            f"at position {event.position}, where {expected} was next"
            if self._dense
            else f"at position {event.position}, not after {expected - 1}"
        )
        raise TamperedError(event.stream, event.seq, f"{where} (a row moved or is lost)")

    @staticmethod
    def _refuse(event: Event, before: Event) -> None:
        if event.seq != before.seq + 1:
            missing = f"event missing (next is {event.seq})"
            raise CorruptEventError(event.stream, before.seq + 1, missing)
        raise TamperedError(event.stream, event.seq, BROKEN)


def verify(
    stream: str,
    rows: Iterable[list[Event]],
    blob: Callable[[str], bytes | RedactedMarker | None],
    head: Callable[[], tuple[int, bytes]],
    proof: Proof | None = None,
) -> Verification:
    """Walk ``stream``'s ``rows`` (each row's events as the store holds them, each row checked
    as it is read: ``CorruptEventError`` at one that does not hold what its hash and columns
    say): chain, the blobs they name (``blob``: a blob's bytes by sha-256) and the stream's
    ``head`` (read last); then, the chain intact, its ``proof``: signed heads and witness
    (``plait.events._proof``)."""
    from plait.events._blobstore import REDACTED

    previous = GENESIS_HASH
    position = seq = 0
    blobs = redacted = 0
    policies: dict[str | None, str] = {}  # each conversation's storage policy, but full
    deleted: list[tuple[int, str | None, str]] = []  # (seq, conversation, sha256), unexplained
    erasures: list[ContentErased] = []

    def bad(at: int, reason: str) -> Verification:
        return Verification(stream, False, seq, at, reason, blobs, redacted)

    for event in _each(rows):
        seq += 1
        if isinstance(event, CorruptEventError):
            return bad(seq, event.reason)
        if (wrong := misplaced(event, stream, seq)) is not None:
            return bad(seq, wrong)
        if event.prev_hash != previous:
            return bad(seq, BROKEN)
        if event.position <= position:
            where = f"at position {event.position}, not after seq {seq - 1}'s ({position})"
            return bad(seq, f"{where}: a row moved")
        position = event.position
        if proof is not None:
            proof.see(event)
        body = event.body
        if isinstance(body, ConversationOpened) and body.storage_policy.kind != "full":
            policies[event.conversation_id] = body.storage_policy.kind
        for ref in blob_refs(body):
            blobs += 1
            found = blob(ref.sha256)
            if found is REDACTED:
                if policies.get(event.conversation_id, "full") == "ttl":
                    redacted += 1
                else:  # damage, unless a later ContentErased erased it
                    deleted.append((seq, event.conversation_id, ref.sha256))
            elif not isinstance(found, bytes):
                return bad(seq, f"blob sha256:{ref.sha256} is missing")
            elif hashlib.sha256(found).hexdigest() != ref.sha256:
                return bad(seq, f"blob sha256:{ref.sha256} content was edited")
        if isinstance(body, ContentErased):
            erasures.append(body)
        previous = event.hash
    for at, cid, sha256 in deleted:
        if not any(_covers(erasure, at, cid) for erasure in erasures):
            policy = policies.get(cid, "full")
            return bad(at, _deleted(sha256, cid, policy))
    redacted += len(deleted)
    head_seq, head_hash = head()
    if head_seq != seq:
        return bad(seq + 1, f"the stream head says seq {head_seq}, the log ends at {seq}")
    if seq and head_hash != previous:
        return bad(seq, "the stream head's hash does not match the last event")
    report = Verification(stream, True, seq, None, "", blobs, redacted)
    return report if proof is None else proof.verdict(report)


def _each(rows: Iterable[list[Event]]) -> Iterator[Event | CorruptEventError]:
    """The events of ``rows``, then what stopped them, if anything did."""
    try:
        for events in rows:
            yield from events
    except CorruptEventError as exc:
        yield exc


def _covers(erasure: ContentErased, seq: int, conversation_id: str | None) -> bool:
    """Whether ``erasure`` erased content of the event ``seq`` of ``conversation_id``."""
    if seq > erasure.upto_seq:
        return False
    return not erasure.conversations or conversation_id in erasure.conversations


def _deleted(sha256: str, conversation_id: str | None, policy: str) -> str:
    """Why a deleted blob of ``conversation_id`` is damage (docs/storage.md#blobs)."""
    whose = "the session's" if conversation_id is None else f"conversation {conversation_id}'s"
    return (
        f"blob sha256:{sha256} was deleted, but {whose} storage policy is {policy} and "
        "no erasure covers it: only ttl content expires"
    )
