"""A session's journal: the one writer of its stream, and who hears what it records.

Every actor of a session records through the journal. Under one lock it appends to the store
with the stream's expected seq (so a second process writing the same session fails loudly
instead of forking the log) and the owner's lease epoch (so a stale owner cannot write at all),
keeps the seq and hash chain, and hands each group to its ``Delivery`` (``_delivery.py``), which
keeps it for the actors that fold it and hands it to the live feeds with the transient
notifications that are never stored, or, in a process that follows the session, what its
owner recorded.

An actor may record *ahead* (docs/event-log.md#writing-ahead): the journal makes the events
(seq, time, hash) and the actors fold them at once, and the actor writes them with ``flush``
after it has started what only needs them made (the model request of the task it starts).
Nothing outside hears of them before they are durable: feeds, acknowledgements and every
synchronous record come after the write. A write the store fails, ahead or not, seals it and
stops the session in this process (``on_lost``), and so does an actor that broke (``fail``,
docs/failures.md#supervision): its log is the truth to resume from.

It folds the session's ``TaskQueue`` as it records, in log order, under its lock: the one fold
of it in a running session. The scheduler decides from it (``tasks``), a conversation ends its
task by it (``waiting``), and the runtime passivates by it (``idle``, ``on_idle``).

What the owner of the session wants to hear (``on_idle``, ``on_lost``) and asks (``may_act``)
is given when the journal is made, never set later (``SessionHost`` makes it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

import msgspec

from plait._errors import LeaseLostError, PlaitError, SessionFailedError, StoreError
from plait.actors._delivery import Delivery
from plait.actors._feed import DEFAULT_FEED_LIMIT, Feed, Kinds
from plait.actors._listening import Listeners
from plait.events import (
    GENESIS_HASH,
    SIGN_EVERY,
    Body,
    Event,
    EventStore,
    HeadSigned,
    NewEvent,
    Policies,
    PreparedAppend,
    Signer,
    Transient,
    ends_task,
)
from plait.events.projections import TASKS, TaskQueue

if TYPE_CHECKING:
    from plait.actors._refs import Recipient

__all__ = ["Journal"]

log = logging.getLogger("plait")


class Journal:
    """Appends a session's events in order, fenced by its lease epoch, and tells whoever folds
    or follows them; folds its task queue."""

    def __init__(
        self,
        store: EventStore,
        stream: str,
        past: Sequence[Event] = (),
        epoch: int | None = None,
        *,
        on_idle: Callable[[], object] | None = None,
        on_lost: Callable[[PlaitError], object] | None = None,
        may_act: Callable[[], bool] | None = None,
        signer: Signer | None = None,
    ) -> None:
        """Write after ``past`` with lease ``epoch`` (``None``: not fenced).
        ``on_idle``: told when what it records leaves nothing running or queued.
        ``on_lost``: told ``lost`` (on the recording thread) once sealed for it: the store
        refused an append (``LeaseLostError``) or failed one, or an actor broke
        (``SessionFailedError``); it fails the feeds (without it, the writer does).
        ``may_act``: whether the process still owns the session (its lease is not past due),
        asked before anything outside starts, so a process paused past its lease starts
        nothing (without it: always).
        ``signer``: signs the head after each group that ends a task or closes the session,
        and after any group once ``SIGN_EVERY`` events were recorded since the last signed
        head (``HeadSigned``, docs/event-log.md#signed-heads); without it, no head is signed."""
        self.store = store
        self._signer = signer
        self.stream = stream
        self._seq = past[-1].seq if past else 0
        self._hash = _head_hash(past)
        self._signed_seq = _signed_seq(past)  # the last HeadSigned's seq (0: none)
        self._policies = Policies(past)
        self.epoch = epoch
        """The lease epoch every append carries (``None``: not fenced)."""
        self._on_idle = on_idle
        self._on_lost = on_lost
        self._may_act = may_act
        self._sealed = False
        self.refusal: StoreError | None = None
        """Why the store refused an append, if it did (the writer is sealed since)."""
        self.lost: PlaitError | None = None
        """Why the session stopped in this process, if it failed or was lost (sealed since)."""
        self._delivery = self._out = Delivery()
        self._lock = self._out.lock  # one order for the log and for who hears of it
        self._writing = threading.Lock()  # held by the thread writing what was made ahead
        self._ahead: list[PreparedAppend] = []
        """Appends made ahead, not yet being written."""
        self._made = self._durable = 0  # appends made ahead, and of them written
        self._on_durable: list[tuple[int, Callable[[PlaitError | None], object]]] = []
        """Told once the first so many appends made ahead are written (``None``), or why not."""
        self._writes_ahead = store.writes_ahead
        self.last_recorded_at = time.monotonic()
        """When it last recorded anything (``time.monotonic``); a clock for idleness only,
        never written to the log."""
        self._tasks = TASKS.fold(past)

    @property
    def expires(self) -> bool:
        """Whether a conversation of the session has a ``ttl`` storage policy."""
        return self._policies.expires

    @property
    def idle(self) -> bool:
        """Whether nothing runs or waits in the session, by what it has recorded."""
        return self._tasks.running is None and not self._tasks.pending

    @property
    def waiting(self) -> bool:
        """Whether a task waits to start, by what it has recorded."""
        return bool(self._tasks.pending)

    @contextlib.contextmanager
    def tasks(self) -> Iterator[TaskQueue]:
        """Hold the session's task queue still, as folded from what was recorded, while the
        caller reads it (record nothing meanwhile: the lock is held)."""
        with self._lock:
            yield self._tasks

    @property
    def last_seq(self) -> int:
        """The seq of the last event recorded."""
        return self._seq

    def seal(self) -> None:
        """Record nothing more from the actors: the session is being stopped. An actor left
        stuck past a close (or a crash in replay) cannot write after it; ``record_last`` can."""
        with self._lock:
            self._sealed = True

    @contextlib.contextmanager
    def unsealed(self) -> Iterator[bool]:
        """Hold ``seal`` off while an actor starts something outside (a model call, a tool
        call); yields whether it may: not once the session is being stopped, when what a
        stopped actor started would go unrecorded, and in a replay would take the next
        program's turn; nor once ``may_act`` says the process may have lost the session."""
        with self._lock:
            yield not self._sealed and (self._may_act is None or self._may_act())

    def unseal(self) -> None:
        """Record from the actors again: the session's actors were started anew."""
        with self._lock:
            self._sealed = False

    def reload(self, past: Sequence[Event], epoch: int) -> None:
        """Write from the end of ``past`` with ``epoch``: this process took the session over
        (its feeds have had ``past``, from the log)."""
        with self._lock:
            # What the actors of before made and did not write is not in the log: gone with them.
            untold, self._on_durable, self._ahead = self._on_durable, [], []
            self._made = self._durable = 0
            why = self.refusal or LeaseLostError(self.stream, self.epoch or 0)
            self._seq = past[-1].seq if past else 0
            self._hash = _head_hash(past)
            self._signed_seq = _signed_seq(past)
            self._policies = Policies(past)
            self._tasks = TASKS.fold(past)
            self.epoch = epoch
            self._sealed, self.refusal, self.lost = False, None, None
        for _, then in untold:
            then(why)

    def follow(self, events: Sequence[Event]) -> None:
        """Hand the feeds events another process recorded (this one follows the session)."""
        with self._lock:
            for event in events:
                if event.seq > self._seq:
                    self._seq, self._hash = event.seq, event.hash
                    if isinstance(event.body, HeadSigned):
                        self._signed_seq = event.seq
                    self._out.put((event,))

    def fail(self, error: SessionFailedError) -> None:
        """Stop the session in this process: an actor broke. Nothing more is recorded from the
        actors; ``on_lost`` stops them and fails whoever waits. Once sealed, nothing is done:
        the session is being stopped already (an actor stopped meanwhile may raise)."""
        with self._lock:
            if self._sealed:
                log.debug("session %s is stopped: %s", self.stream, error)
                return
            self._sealed, self.lost = True, error
        self._tell_lost(error)

    def record_last(self, items: Sequence[Body | NewEvent]) -> list[Event]:
        """Append what the owner records once the actors are stopped; raise what the store did."""
        return self._record_now(items, None, last=True)

    def record(
        self,
        items: Sequence[Body | NewEvent],
        origin: Recipient | None = None,
        *,
        ahead: bool = False,
        signed: bool = False,
    ) -> list[Event]:
        """Append ``items`` as one atomic group; ``origin`` (the recording actor) is not told.

        ``ahead``: return the events made, not yet durable; the caller has them written
        (``flush``) before it ends its handling (a store that cannot write ahead, or a session
        whose storage policies shape what is stored, has them written now).
        Once sealed, nothing is appended and nothing returned. A write the store fails seals it
        and stops the session (``on_lost``), then its ``StoreError`` is raised (but for a
        ``LeaseLostError``: nothing is returned). What else the store raises (a bug) is raised.
        ``signed``: return the signed head recorded after the group too, if one was (for who
        builds the session's past from what it records).
        """
        if ahead and self._makes_ahead:
            with self._lock:
                return [] if self._sealed else self._record(items, origin, True, signed)
        return self._record_now(items, origin, last=False, signed=signed)

    @property
    def _makes_ahead(self) -> bool:
        return self._writes_ahead and not self._policies.of

    def _record_now(
        self,
        items: Sequence[Body | NewEvent],
        origin: Recipient | None,
        last: bool,
        signed: bool = False,
    ) -> list[Event]:
        """Append ``items`` after what was made ahead, and return once all is durable."""
        if self._makes_ahead:  # made, and written with what was made before, at once
            with self._lock:
                if self._sealed and not last:
                    log.debug("session %s is stopped: %d not recorded", self.stream, len(items))
                    return []
                events = self._record(items, origin, True, signed)
            if self.flush():
                return events
            if last or not isinstance(self.refusal, LeaseLostError):
                raise cast(StoreError, self.refusal)
            return []
        with self._writing:
            self._flush()
            with self._lock:
                if self._sealed and not last:
                    log.debug("session %s is stopped: %d not recorded", self.stream, len(items))
                    return []
                try:
                    return self._record(items, origin, False, signed)
                except StoreError as exc:
                    if last:  # the owner records it, and stops the session itself
                        raise
                    error, why = exc, self._refused(exc, items)
        self._tell_lost(why)
        if isinstance(error, LeaseLostError):
            return []
        raise error

    def when_durable(self, then: Callable[[PlaitError | None], object]) -> None:
        """Call ``then`` once what was made ahead so far is written (with ``None``), or
        with why it was not; at once if nothing waits to be written."""
        with self._lock:
            if self._durable < self._made and self.refusal is None:
                self._on_durable.append((self._made, then))
                return
            why = None if self.refusal is None else self.lost
        then(why)

    def flush(self) -> bool:
        """Write what was made ahead (even once sealed: the actors acted on it); return once
        it is durable, with whether it is. If not, the session is stopped in this process
        (``on_lost``), and its feeds are told why."""
        with self._writing:
            return self._flush()

    def _flush(self) -> bool:
        """``flush``, holding ``_writing``."""
        with self._lock:
            made, self._ahead = self._ahead, []
        if not made:
            return self.refusal is None
        error: StoreError | None = None
        joined = PreparedAppend.joined(made)
        try:
            self.store.append_prepared(self.stream, joined, epoch=self.epoch)
        except Exception as exc:  # whatever the store raised, these events are not written
            error = exc if isinstance(exc, StoreError) else StoreError(f"{exc!r}")
        else:
            if self._signer is not None:  # durable: witnessed before anyone hears of them
                self._witness([e for e in joined.events if isinstance(e.body, HeadSigned)])
        why: PlaitError | None = None
        with self._lock:
            if error is None:
                self._durable += len(made)
                self._out.put(joined.events)
                told = [then for upto, then in self._on_durable if upto <= self._durable]
                self._on_durable = [(n, t) for n, t in self._on_durable if n > self._durable]
            else:
                why = self._refused(error, joined.events)
                told, self._on_durable = [then for _, then in self._on_durable], []
        for then in told:
            then(why)
        if why is not None:
            self._tell_lost(why)
        return error is None

    def _refused(self, error: StoreError, items: Sequence[Body | NewEvent | Event]) -> PlaitError:
        """Seal: the store refused or failed to append ``items``; return why (hold the lock)."""
        lease = isinstance(error, LeaseLostError)
        why = error if lease else _write_failed(self.stream, error, items)
        self._sealed, self.refusal, self.lost = True, error, why
        return why

    def _tell_lost(self, error: PlaitError) -> None:
        log.info("session %s: %s", self.stream, error)  # the callers hear of it: not twice
        if self._on_lost is not None:
            self._on_lost(error)  # it fails the feeds
        else:
            self._out.fail(error)

    def _record(
        self,
        items: Sequence[Body | NewEvent],
        origin: Recipient | None,
        ahead: bool,
        signed: bool = False,
    ) -> list[Event]:
        self.last_recorded_at = time.monotonic()
        events = self._append(items, ahead)
        busy = not self.idle
        TASKS.fold(events, self._tasks)
        if busy and self.idle and self._on_idle is not None:
            self._on_idle()
        self._deliver(origin, events, ahead)
        if self._signer is not None and (
            ends_task([e.body for e in events]) or self._seq - self._signed_seq >= SIGN_EVERY
        ):
            head = self._sign_head(ahead)
            return events + head if signed else events
        return events

    def _sign_head(self, ahead: bool) -> list[Event]:
        """Record the signed head after what was just recorded: its own group (a crash between
        leaves that group unsigned, as verify reports). Every actor hears of it; it is not
        returned to the one that recorded the task's end, whose group that stays."""
        assert self._signer is not None
        signed = self._append([self._signer.head(self.stream, self._seq, self._hash)], ahead)
        self._signed_seq = self._seq
        if not ahead:  # durable: witnessed before anyone hears of it (made ahead: by _flush)
            self._witness(signed)
        self._deliver(None, signed, ahead)
        return signed

    def _witness(self, heads: list[Event]) -> None:
        """Write each of ``heads``, durable signed heads, to the signer's witness before
        anyone hears of them (hold ``_writing``: one writes at a time, in log order)."""
        if self._signer is not None:
            for event in heads:
                self._signer.witnessed(event)

    def _deliver(self, origin: Recipient | None, events: list[Event], ahead: bool) -> None:
        """Keep ``events`` for the actors but ``origin``; hand them to the feeds now, unless
        made ahead (the feeds have them once they are written)."""
        self._out.keep(origin, events)
        if not ahead:
            self._out.put(events)

    def _append(self, items: Sequence[Body | NewEvent], ahead: bool) -> list[Event]:
        """Append what each conversation's storage policy keeps of ``items`` (``ahead``: make
        it, to write with ``flush``); return them all, with their content, as the actors fold
        them."""
        # A conversation's opening follows its own policy; the session's start says where
        # its content goes.
        self._policies.learn(items)
        if self._policies.plain:  # every conversation is kept in full, inline: nothing to shape
            events = self._write(items, ahead)
            if events:
                self._seq, self._hash = events[-1].seq, events[-1].hash
            return events
        drafts = [item if isinstance(item, NewEvent) else NewEvent(item) for item in items]
        kept = [self._policies.shape(draft) for draft in drafts]
        appended = iter(self._write([k for k in kept if k], ahead))
        events = []
        for draft, stored in zip(drafts, kept, strict=True):
            if stored is None:  # not in the log: placed after the last event that is
                at = events[-1].at if events else self.store.clock()
                events.append(draft.unstored(self.stream, self._seq, at))
                continue
            event = next(appended)
            self._seq, self._hash = event.seq, event.hash
            if stored.body is not draft.body:
                event = msgspec.structs.replace(event, body=draft.body)
            events.append(event)
        return events

    def _write(self, items: Sequence[Body | NewEvent], ahead: bool) -> list[Event]:
        """Append ``items`` now, or make them to write with ``flush``; their events."""
        if not ahead:
            return self.store.append(self.stream, items, self._seq, epoch=self.epoch)
        if not items:
            return []
        made = self.store.prepare(self.stream, items, self._seq, self._hash)
        self._ahead.append(made)
        self._made += 1
        return made.events

    @property
    def listeners(self) -> Listeners:
        """The actors that fold what the others record, and what they have yet to take."""
        return self._delivery.listeners

    @property
    def wants_deltas(self) -> bool:
        """Whether a live feed takes transient notifications: if none does, a model call need
        not make its text deltas (a reader that subscribes later sees those after it)."""
        return self._delivery.wants_deltas

    def deliver(self, events: Sequence[Event]) -> None:
        """Hand the feeds events another process recorded (this one follows the session)."""
        self.follow(events)

    def fail_feeds(self, error: Exception) -> None:
        """Tell every live feed's reader that the session is gone from this process."""
        self._delivery.fail(error)

    def publish(self, notice: Transient) -> None:
        """Hand a transient notification to the live feeds (it is never stored)."""
        self._delivery.notice(notice)

    def feed(
        self, transient: bool = True, limit: int = DEFAULT_FEED_LIMIT, kinds: Kinds | None = None
    ) -> Feed:
        """Return a live feed of what is recorded from now on, holding at most ``limit`` items
        its reader has not taken.

        Transient notifications are handed to it too, unless ``transient`` is false; events
        only of ``kinds``, if given.
        """
        with self._delivery.lock:  # it begins at the last seq, and is handed what follows
            feed = Feed(self, transient, limit, kinds)
            self._delivery.add(feed)
        return feed

    def unsubscribe(self, feed: Feed) -> None:
        """Stop handing ``feed`` what is recorded (its ``close``)."""
        self._delivery.remove(feed)


def _write_failed(
    stream: str, error: StoreError, items: Sequence[Body | NewEvent | Event]
) -> SessionFailedError:
    """What the session's callers hear when the store failed to write ``items``."""
    kinds = ", ".join(dict.fromkeys(type(getattr(i, "body", i)).__name__ for i in items))
    return SessionFailedError(stream, "the store", f"the write of {kinds}", error)


def _signed_seq(past: Sequence[Event]) -> int:
    """The seq of the last signed head of ``past`` (0: none)."""
    for event in reversed(past):
        if isinstance(event.body, HeadSigned):
            return event.seq
    return 0


def _head_hash(past: Sequence[Event]) -> bytes:
    """The hash of the last stored event of ``past`` (the next one's ``prev_hash``)."""
    for event in reversed(past):
        if event.hash:  # an event a storage policy left out of the log has none
            return event.hash
    return GENESIS_HASH
