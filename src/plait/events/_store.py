"""The store contract, and everything about it that does not depend on the backend.

A store is an append-only log of event streams, read one stream at a time or all of them in
one global order (docs/event-log.md#streams-seq-and-position). It has four parts, each with a
contract of its own that each backend fulfils: its ``blobs`` (``plait.events._blobstore``),
the ``leases`` and ``inbox`` of the processes sharing it (``plait.events._leases``,
``plait.events._inbox``), and the records of the sessions a prune removed
(``plait.events._pruning``).

A backend stores rows (an append each: ``plait.events._per_append``) and provides a few
primitives (``_append_rows``, ``_rows``, ``_all_rows``...). Encoding, the hash chain, blob
extraction, decoding, gap detection, verification and subscriptions live here, once, so every
backend behaves the same and one contract suite tests them all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from types import TracebackType

import msgspec

from plait._errors import (
    ConcurrencyError,
    CorruptEventError,
    TamperedError,
)
from plait.events._blobs import DEFAULT_BLOB_THRESHOLD
from plait.events._blobstore import REDACTED, BlobStore, RedactedMarker
from plait.events._checks import (
    Links,
    Placed,
    Verification,
    link,
    misplaced,
    position_gap,
    position_gaps,
    verify,
)
from plait.events._erased import mark_erased
from plait.events._inbox import Inbox
from plait.events._leases import Leases
from plait.events._prepared import PreparedAppend, draft, encode
from plait.events._proof import Proof
from plait.events._pruned import PrunedPositions
from plait.events._pruning import Pruning
from plait.events._signing import PublicKey
from plait.events._space import Space
from plait.events._stored import Stored, row_events
from plait.events._subscription import ConditionWaiter, Signal, Subscription, Waiter
from plait.events._types import Body, ContentErased, Event, NewEvent
from plait.events._witness import Witness

__all__ = [
    "REDACTED",
    "BlobState",
    "Clock",
    "EventStore",
    "PreparedAppend",
    "RedactedMarker",
    "StreamInfo",
    "Subscription",
    "Verification",
    "Waiter",
    "check_expected",
    "utc_now",
]

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Return the current time in UTC (the default store clock)."""
    return datetime.now(UTC)


BlobState = Callable[[str], "bytes | RedactedMarker | None"]
"""A blob's bytes by sha-256, ``REDACTED`` (deleted, a tombstone left), or ``None``: unknown."""


class StreamInfo(msgspec.Struct, frozen=True):
    """One stream (session) in a store."""

    stream: str
    """The stream id."""
    last_seq: int
    """Its last event's seq."""


def check_expected(stream: str, expected_seq: int, head_seq: int) -> None:
    """Refuse an append to ``stream`` made to follow ``expected_seq`` when its head is
    ``head_seq`` (``ConcurrencyError``)."""
    if expected_seq != head_seq:
        raise ConcurrencyError(stream, expected_seq, head_seq)


_BATCH = 500
"""The most events a subscription reads at a time."""


class EventStore(ABC):
    """An append-only log of event streams, read one at a time or all in global order.

    ``append`` is atomic: all of its events are stored, chained and visible, or none are.
    Each backend gives its store the four parts below, built on the store's own connection.
    """

    blobs: BlobStore
    """Its blobs: content kept beside the log by sha-256, deleted, erased."""
    leases: Leases
    """The leases of the processes sharing it: who owns each session, at which epoch."""
    inbox: Inbox
    """The commands any process stores for a session's owner."""
    pruning: Pruning
    """The records of the sessions a prune removed, and the removal."""

    writes_ahead = True
    """Whether a stream's writer may ``prepare`` appends before it writes them."""
    dense_positions = True
    """Whether positions run from 1 without a gap but where a prune removed sessions, so a
    jump is a row lost (docs/event-log.md#streams-seq-and-position)."""

    def __init__(
        self, *, blob_threshold: int = DEFAULT_BLOB_THRESHOLD, clock: Clock = utc_now
    ) -> None:
        self.blob_threshold = blob_threshold
        self.clock = clock
        self._appended = Signal()  # appends through this object
        self._taps: list[Callable[[list[Event]], object]] = []
        self._closed = False

    # --- writing ----------------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[Body | NewEvent],
        expected_seq: int,
        *,
        epoch: int | None = None,
    ) -> list[Event]:
        """Append ``events`` after seq ``expected_seq`` of ``stream`` (0 for a new stream).

        With ``epoch``, the writer's lease epoch, the append is refused unless it is still the
        stream's (checked in the append's transaction: ``LeaseLostError``).
        Raises ``ConcurrencyError`` when the stream has moved on, and ``TransientEventError``
        for a notification that is never persisted.
        """
        drafts = [draft(stream, item) for item in events]
        if not drafts:
            return []
        events_out = self._append_rows(
            stream,
            expected_seq,
            lambda head_seq, head_hash: self._prepare(stream, drafts, head_seq, head_hash),
            epoch,
        )
        self._notify(events_out)
        return events_out

    def prepare(
        self, stream: str, events: Sequence[Body | NewEvent], head_seq: int, head_hash: bytes
    ) -> PreparedAppend:
        """Encode and chain ``events`` (stamped now) to follow seq ``head_seq``, of hash
        ``head_hash``, for ``append_prepared``; raise as ``append`` does for what it refuses."""
        drafts = [draft(stream, item) for item in events]
        return self._prepare(stream, drafts, head_seq, head_hash)

    def append_prepared(
        self, stream: str, prepared: PreparedAppend, *, epoch: int | None = None
    ) -> list[Event]:
        """Append what ``prepare`` made, as ``append`` would (``ConcurrencyError`` unless the
        stream's head is still the event it was made to follow)."""
        first = prepared.events[0]

        def made(head_seq: int, head_hash: bytes) -> PreparedAppend:
            if head_hash != first.prev_hash:  # its seq, but other events: another writer's
                raise ConcurrencyError(stream, first.seq - 1, head_seq)
            return prepared

        events = self._append_rows(stream, first.seq - 1, made, epoch)
        self._notify(events)
        return events

    def _prepare(
        self, stream: str, drafts: list[NewEvent], head_seq: int, head_hash: bytes
    ) -> PreparedAppend:
        """Encode and chain ``drafts``, stamped now where they have no time."""
        now = self.clock().astimezone(UTC)
        scope = self.blobs.scope
        return encode(stream, drafts, head_seq, head_hash, now, self.blob_threshold, scope)

    # --- reading ----------------------------------------------------------------------------

    def read(
        self,
        stream: str,
        *,
        after: int = 0,
        upto: int | None = None,
        limit: int | None = None,
        resolve_blobs: bool = True,
        check: bool = True,
    ) -> list[Event]:
        """Return the events of ``stream`` with ``after < seq <= upto``, at most ``limit``,
        each checked against its hash, its columns and its link to the one before, and the
        stream's head against its event (``TamperedError``), unless not ``check``: what is
        there, unvouched for (``plait log --unverified``)."""
        # The head first: a stream only grows, so every event up to it must be in the rows
        # read next, whatever is appended meanwhile.
        head, head_hash = self._head(stream)
        events, before = self._window(stream, after, upto, limit, resolve_blobs, check)
        expected = after + 1
        for event in events:
            if (wrong := misplaced(event, stream, expected)) is not None:
                raise CorruptEventError(stream, expected, wrong)
            expected += 1
        end = head if upto is None else min(upto, head)
        if (limit is None or len(events) < limit) and expected <= end:
            # A short read must be the true end of the window, not a lost tail.
            raise CorruptEventError(stream, expected, "event missing (the stream is longer)")
        if resolve_blobs and any(type(e.body) is ContentErased for e in events):
            events = mark_erased(events)  # what an erasure in this window covers
        if check and events:
            link(stream, events, self._hash_at(stream, after) if before is None else before)
            last = head - after - 1  # the stream's head event, if this window holds it
            if 0 <= last < len(events) and events[last].hash != head_hash:
                why = "the stream head's hash does not match its last event"
                raise TamperedError(stream, head, why)
        return events

    def _resolving(
        self, decode: Callable[[Callable[[Event], Event] | None], list[Event]], resolve: bool
    ) -> list[Event]:
        """What ``decode`` returns, given what to call on each event that may name a blob, with
        those blobs read (``resolve``) in one go."""
        if not resolve:
            return decode(None)
        held: list[Event] = []  # those whose bytes may hold a blob reference

        def hold(event: Event) -> Event:
            held.append(event)
            return event

        events = decode(hold)
        return self.blobs.resolve(events, held) if held else events

    def last_seq(self, stream: str) -> int:
        """Return the seq of the last event of ``stream`` (0 when it has none)."""
        return self._head(stream)[0]

    def space(self) -> Space:
        """Return how much room the store takes, and what a vacuum would give back."""
        return Space(None, None)

    def streams(self) -> list[StreamInfo]:
        """List every stream, oldest first."""
        return [StreamInfo(stream, last) for stream, last in self._streams()]

    def stored_bytes(self, stream: str) -> int | None:
        """The bytes ``stream``'s events take as stored (their content apart), where they are
        not an event a row with its data and hash (a SQLite store of layout 4 compresses an
        append in a row); ``None`` where they are (``usage`` adds up the rows)."""
        return None

    @abstractmethod
    def as_stored(self, stream: str) -> Stored:
        """``stream``'s rows as stored, unchecked, its head and the store's blobs: what
        ``verify`` walks and an evidence bundle copies byte for byte (``events/_bundle.py``)."""

    # --- every stream in one order -----------------------------------------------------------

    def read_all(
        self,
        after_position: int = 0,
        *,
        limit: int | None = 1000,
        resolve_blobs: bool = True,
        settled: bool = False,
    ) -> list[Event]:
        """Return events of every stream after ``after_position``, in global order (each
        checked against its hash, its columns, its link to the one before it in the same read
        and its position: after the one before, right after where positions are dense).
        ``settled``: only those no commit to
        come can precede, so that a reader going on after the last never misses one (where
        positions are not in commit order: docs/event-log.md#streams-seq-and-position)."""
        events = self._all_events(after_position, limit, resolve_blobs, settled)
        Links(after_position, self.pruning.covers, dense=self.dense_positions).check(events)
        return events

    def iter_all(
        self, after_position: int = 0, *, batch: int = 2000, resolve_blobs: bool = True
    ) -> Iterator[Event]:
        """Iterate over every stored event in global order, reading ``batch`` at a time."""
        for events in self.batches(after_position, batch=batch, resolve_blobs=resolve_blobs):
            yield from events

    def batches(
        self, after_position: int = 0, *, batch: int = 2000, resolve_blobs: bool = True
    ) -> Iterator[list[Event]]:
        """Iterate over every stored event in global order as lists of up to ``batch``
        (the fastest way to rebuild a projection: ``projection.fold(events, state)`` each)."""
        links = Links(after_position, self.pruning.covers, dense=self.dense_positions)
        while True:
            events = self._all_events(after_position, batch, resolve_blobs, False)
            links.check(events)
            if events:
                yield events
            if len(events) < batch:
                return
            after_position = events[-1].position

    def last_position(self) -> int:
        """Return the global position of the last event stored (0: none); of the last one
        settled (``read_all``), where positions are not in commit order."""
        return self._last_position()

    # --- live tails -------------------------------------------------------------------------

    def subscribe(self, from_position: int = 0) -> Subscription:
        """Return a live iterator over every event after ``from_position``, each exactly once."""
        return Subscription(self._settled_batch, from_position, self._waiter(), self._read_whole)

    def _settled_batch(self, after_position: int) -> list[Event]:
        """What a subscription reads at a time: settled events after ``after_position``."""
        return self.read_all(after_position, limit=_BATCH, settled=True)

    def _read_whole(self, batch: list[Event]) -> bool:
        """Whether a subscription's read of ``batch`` found all there was to hand out."""
        return len(batch) < _BATCH and not self._held_back()

    def _held_back(self) -> bool:
        """Whether the last settled read left committed events above the bound (where
        positions are not in commit order)."""
        return False

    # --- taps -------------------------------------------------------------------------------

    def tap(self, listener: Callable[[list[Event]], object]) -> Callable[[], None]:
        """Hand ``listener`` each group appended through this object once durable, on the
        appending thread (it must only queue it); return what stops it (docs/telemetry.md#live)."""
        self._taps = [*self._taps, listener]
        return lambda: setattr(self, "_taps", [t for t in self._taps if t is not listener])

    def _notify(self, events: list[Event]) -> None:
        self._appended.notify()
        for listener in self._taps:
            listener(events)

    def _waiter(self) -> Waiter:
        return ConditionWaiter(self._appended)

    # --- integrity --------------------------------------------------------------------------

    def verify(
        self, stream: str, *, public_key: PublicKey | None = None, witness: Witness | None = None
    ) -> Verification:
        """Walk ``stream``: each row's hash, chain link, columns and position, its blobs, and
        the stream's head; its signed heads, checked against ``public_key`` if given (else
        only said), and with a key the ``witness``'s latest head of it, which must be in the
        log (docs/event-log.md#the-witness); then the positions of the whole store, dense
        from 1 (docs/event-log.md#streams-seq-and-position); report the first bad seq."""
        proof = Proof.of(stream, public_key, witness)
        stored = self.as_stored(stream)
        pruned = self.pruning.records(stream) if not stored.rows and not stored.head[0] else []
        if pruned:  # its events are gone; its record says what they were
            return proof.pruned(Verification(stream, True, 0, pruned=pruned[-1]), pruned[-1])
        rows = (events for _, events in row_events(stored.layout, stored.rows))
        report = verify(stream, rows, self.blobs.state, lambda: self._head(stream), proof)
        # Whichever stream lost the row, every read across the store stops there.
        return self._whole(report) if report.ok else report

    def _whole(self, report: Verification) -> Verification:
        """``report``, of a stream found good, with what the whole store's positions say: the
        first gap no pruned session accounts for, or how many sessions were pruned."""
        records = self.pruning.records()
        gap = self._position_gap()
        if gap is not None:
            pruned = PrunedPositions(records)
            gaps = [gap] if not pruned.covers(gap[0] + 1, gap[1] - 1) else self._position_gaps()
            for before, after in gaps:
                if not pruned.covers(before + 1, after - 1):
                    return position_gap(report, before, self._placed(before, 1)[0])
        if not records:
            return report
        events = sum(record.events for record in records)
        return msgspec.structs.replace(report, pruned_sessions=len(records), pruned_events=events)

    def check_file(self, full: bool = False) -> str | None:
        """What the backend's own check of its storage finds wrong, if anything (SQLite:
        ``PRAGMA quick_check``, ``integrity_check`` when ``full``); ``None``: nothing."""
        return None

    # --- backend primitives -----------------------------------------------------------------

    @abstractmethod
    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        """In one transaction: read the head (and with ``epoch`` the lease: ``check_epoch``),
        check it, ``prepare``, write rows, blobs, head."""

    @abstractmethod
    def _head(self, stream: str) -> tuple[int, bytes]:
        """Return ``(last_seq, last_hash)`` of a stream, ``(0, GENESIS_HASH)`` when empty."""

    @abstractmethod
    def _window(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        resolve_blobs: bool,
        check: bool,
    ) -> tuple[list[Event], bytes | None]:
        """Return ``stream``'s events with ``after < seq <= upto`` in seq order, at most
        ``limit``, each row checked as it is read (unless not ``check``), and the hash of seq
        ``after`` if the read found it (``None``: ``_hash_at`` reads it)."""

    @abstractmethod
    def _hash_at(self, stream: str, seq: int) -> bytes:
        """Return the hash of event ``seq`` of ``stream`` as its row holds it
        (``GENESIS_HASH`` for 0)."""

    @abstractmethod
    def _streams(self) -> list[tuple[str, int]]:
        """Return ``(stream, last_seq)`` for each stream, oldest first."""

    @abstractmethod
    def _all_events(
        self, after_position: int, limit: int | None, resolve_blobs: bool, settled: bool
    ) -> list[Event]:
        """Return events of every stream after ``after_position`` in position order, at most
        ``limit``, each row checked as it is read; ``settled``: only those no later commit
        can precede."""

    @abstractmethod
    def _last_position(self) -> int:
        """Return the last position stored, 0 when there is none."""

    @abstractmethod
    def _position_gap(self) -> tuple[int, int] | None:
        """The first place where positions are not dense from 1: the position before it (0:
        none) and the next one stored; ``None`` where they are (or are not kept dense)."""

    def _position_gaps(self) -> list[tuple[int, int]]:
        """Every place where positions are not dense from 1, as ``_position_gap`` gives the
        first (a prune leaves one per run of positions it removed)."""
        return list(position_gaps(self._placed))

    @abstractmethod
    def _placed(self, after_position: int, limit: int) -> list[Placed]:
        """Where the events after ``after_position`` are (position, stream, seq), in position
        order, as their rows say, unchecked: what a gap report names."""

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def close(self) -> None:
        """Release the store's connections; idempotent."""
        self._closed = True

    def __enter__(self) -> EventStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
