"""A session's journal: the one writer of its stream, and the live feed of what happens in it.

Every actor of a session records through the journal. Under one lock it appends to the store
(with the stream's expected seq, so a second process writing the same session fails loudly
instead of forking the log), keeps what was recorded for the other actors to fold (each takes
it, in log order, before it handles its next message: so before any command sent after the
recording, and without a wake-up of its thread per event), and hands the events to live
subscribers together with the transient notifications (text deltas) that are never stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

from plait.actors.messages import CatchUp
from plait.events.projections.tasks import TASKS
from plait.events.storage import Policies
from plait.events.store import EventStore
from plait.events.types import Body, Event, FeedLagged, NewEvent, Transient

__all__ = ["DEFAULT_FEED_LIMIT", "Feed", "HeldDeltas", "Journal", "Kinds"]

log = logging.getLogger("plait")

_CLOSED = object()


BACKLOG = 256
"""How many recorded groups the journal keeps for an actor that has not folded them, before it
tells that actor to (``CatchUp``); an actor with messages to handle folds them first anyway."""

DEFAULT_FEED_LIMIT = 10_000
"""How many items a feed holds for a reader that does not take them, before it lags."""


class Feed(Iterator["Event | Transient"]):
    """A live view of a session: its events as they are recorded, and transient deltas.

    Read it from a thread (``get``, iteration) or from asyncio code (``aget``, ``async for``):
    an asyncio reader waits on a future of its own loop, woken by whoever records, so any
    number of them cost no thread. It holds at most ``limit`` items: a reader that falls that
    far behind gets one ``FeedLagged`` in place of what did not fit, then what is recorded
    after it has caught up (``catch_up`` reads the gap from the log).
    """

    def __init__(
        self,
        journal: Journal,
        transient: bool = True,
        limit: int = DEFAULT_FEED_LIMIT,
        kinds: Kinds | None = None,
    ) -> None:
        self._journal = journal
        self.transient = transient
        """Whether transient notifications (text deltas) are handed to this feed."""
        self.kinds = kinds
        """The events it holds and which of them wake an asyncio reader (all, if ``None``)."""
        self.limit = limit
        """The most items it holds before it lags."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None
        """The asyncio reader waiting for the next item, if one is."""
        self.after_seq = journal.last_seq
        """The seq of the last event recorded before the feed began: it holds what follows."""
        self._last_seq = journal.last_seq  # of the last event queued whole
        self._lagging = False  # a FeedLagged is queued and not yet taken: drop what comes
        self._seen_upto = 0  # catch_up handed out the log up to here: skip those events

    @property
    def closed(self) -> bool:
        """Whether the feed is closed (a reader then gets ``None``, at once)."""
        return self._closed

    def put(self, item: Any) -> None:
        if self._lagging:
            return
        wakes = True
        if isinstance(item, Event):
            self._last_seq = item.seq
            if self.kinds is not None:
                if not isinstance(item.body, self.kinds.held):
                    return
                wakes = isinstance(item.body, self.kinds.waking)
        if item is not _CLOSED and self._queue.qsize() >= self.limit:
            self._lagging = wakes = True
            item = FeedLagged(self._journal.stream, self._last_seq_before(item))
        self._queue.put(item)
        waiter = self._waiter
        if waiter is not None and wakes:
            self._waiter = None
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    def _last_seq_before(self, item: Any) -> int:
        return item.seq - 1 if isinstance(item, Event) else self._last_seq

    def catch_up(self, lagged: FeedLagged) -> list[Event]:
        """Return what the log holds after ``lagged.after_seq`` (what the feed could not
        hold, and perhaps more); the feed then skips the events it returned."""
        after = max(lagged.after_seq, self._seen_upto)  # lagged again before reading it
        missed = self._journal.store.read(self._journal.stream, after=after)
        if missed:
            self._seen_upto = max(self._seen_upto, missed[-1].seq)
        return missed

    async def aget(self, timeout: float | None = None) -> Event | Transient | None:
        """``get`` for asyncio code: wait for the next item without blocking the loop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            item = self.get(timeout=0)
            if item is not None or self._closed:
                return item
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            if not self._queue.empty():  # put before the waiter was seen: do not wait
                self._waiter = None
                continue
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                self._waiter = None
                return None
            try:
                if left is None:
                    await waiter
                else:
                    async with asyncio.timeout(left):
                        await waiter
            except TimeoutError:
                return None
            finally:  # woken, timed out or cancelled: this future is done with
                if self._waiter is waiter:
                    self._waiter = None

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> Event | Transient:
        item = await self.aget()
        if item is None:
            raise StopAsyncIteration
        return item

    def get(self, timeout: float | None = None) -> Event | Transient | None:
        """Return the next item, or ``None`` after ``timeout`` seconds or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            left = None if deadline is None else deadline - time.monotonic()
            try:
                if left is not None and left <= 0:
                    item = self._queue.get_nowait()
                else:
                    item = self._queue.get(timeout=left)
            except queue.Empty:
                return None
            if item is _CLOSED:
                self._closed = True
                return None
            if isinstance(item, FeedLagged):
                self._lagging = False  # taken: what is recorded from now on fits again
            elif isinstance(item, Event) and item.seq <= self._seen_upto:
                continue  # catch_up handed it out from the log
            return item  # type: ignore[no-any-return]
        return None

    def __next__(self) -> Event | Transient:
        item = self.get()
        if item is None:
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop the feed; a blocked ``get`` or ``aget`` returns ``None``."""
        self._journal._unsubscribe(self)
        self._lagging = False
        self.put(_CLOSED)  # wakes a blocked reader
        self._closed = True

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Feed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Kinds(NamedTuple):
    """The events a feed holds (``held``), and those that wake its asyncio reader
    (``waking``): the others wait in it for the next that does. A reader that follows a task to
    its end so takes one wake-up per task, not one per recorded group."""

    held: tuple[type[Body], ...]
    waking: tuple[type[Body], ...]


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Journal:
    """Appends a session's events in order and tells whoever folds them."""

    def __init__(self, store: EventStore, stream: str, past: Sequence[Event] = ()) -> None:
        self.store = store
        self.stream = stream
        self._seq = past[-1].seq if past else 0
        self._policies = Policies(past)
        self._sealed = False
        self._lock = threading.Lock()
        self._listeners: dict[str, _Listener] = {}
        self._kept: list[tuple[str | None, tuple[Event, ...]]] = []
        """Recorded groups (with the urn of the actor that recorded them) some listener has
        not taken; the first is number ``_kept_from``."""
        self._kept_from = 0
        self._feeds: list[Feed] = []
        self.last_recorded_at = time.monotonic()
        """When it last recorded anything (``time.monotonic``); a clock for idleness only,
        never written to the log."""
        self._tasks = TASKS.fold(past)
        self.on_idle: Callable[[], object] | None = None
        """Called when what it records leaves nothing running or queued."""

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

    @property
    def last_seq(self) -> int:
        """The seq of the last event recorded."""
        return self._seq

    def listen(self, actor_ref: Any) -> None:
        """Keep for ``actor_ref`` what other actors record from now on (see ``recorded``)."""
        with self._lock:
            end = self._kept_from + len(self._kept)
            self._listeners[actor_ref.actor_urn] = _Listener(actor_ref, end)

    def unlisten(self, actor_ref: Any) -> None:
        """Keep nothing more for ``actor_ref``."""
        with self._lock:
            if self._listeners.pop(actor_ref.actor_urn, None) is not None:
                self._forget()

    def recorded(self, actor_ref: Any) -> list[Event]:
        """What others recorded since ``actor_ref`` last asked (or began to listen), in log
        order. An actor calls it before it handles each message."""
        urn = actor_ref.actor_urn
        with self._lock:
            listener = self._listeners.get(urn)
            end = self._kept_from + len(self._kept)
            if listener is None or listener.taken == end:
                return []
            groups = self._kept[listener.taken - self._kept_from :]
            listener.taken, listener.nudged = end, False
            self._forget()
        return [event for origin, events in groups if origin != urn for event in events]

    def _forget(self) -> None:
        """Drop the groups every listener has taken."""
        end = self._kept_from + len(self._kept)
        low = min((listener.taken for listener in self._listeners.values()), default=end)
        if low > self._kept_from:
            del self._kept[: low - self._kept_from]
            self._kept_from = low

    def seal(self) -> None:
        """Record nothing more from the actors: the session is being stopped. An actor left
        stuck past a close (or a crash in replay) cannot write after it; ``record_last`` can."""
        with self._lock:
            self._sealed = True

    def unseal(self) -> None:
        """Record from the actors again: the session's actors were started anew."""
        with self._lock:
            self._sealed = False

    def record_last(self, items: Sequence[Body | NewEvent]) -> list[Event]:
        """Append what the session's owner records once its actors are stopped (the close)."""
        with self._lock:
            return self._record(items, None)

    def record(self, items: Sequence[Body | NewEvent], origin: Any = None) -> list[Event]:
        """Append ``items`` as one atomic group; ``origin`` (the recording actor) is not told.

        Once sealed, nothing is appended and nothing returned.
        """
        with self._lock:
            if self._sealed:
                log.debug("session %s is stopped: %d events not recorded", self.stream, len(items))
                return []
            return self._record(items, origin)

    def _record(self, items: Sequence[Body | NewEvent], origin: Any) -> list[Event]:
        self.last_recorded_at = time.monotonic()
        events = self._append(items)
        busy = not self.idle
        TASKS.fold(events, self._tasks)
        if busy and self.idle and self.on_idle is not None:
            self.on_idle()
        if self._listeners and events:
            self._keep(origin, events)
        for feed in self._feeds:
            for event in events:
                feed.put(event)
        return events

    def _keep(self, origin: Any, events: list[Event]) -> None:
        """Keep ``events`` for the listeners; tell one that lets too many pile up to fold."""
        self._kept.append((None if origin is None else origin.actor_urn, tuple(events)))
        if len(self._kept) <= BACKLOG:
            return
        for urn, listener in list(self._listeners.items()):
            if not listener.ref.is_alive():  # stopped without unlisten (it failed): holds nothing
                del self._listeners[urn]
        self._forget()
        end = self._kept_from + len(self._kept)
        for listener in self._listeners.values():
            if end - listener.taken > BACKLOG and not listener.nudged:
                listener.nudged = True
                with contextlib.suppress(Exception):  # stopped meanwhile: unlisten follows
                    listener.ref.tell(CatchUp())

    def _append(self, items: Sequence[Body | NewEvent]) -> list[Event]:
        """Append what each conversation's storage policy keeps of ``items``; return them all,
        with their content, as the actors fold them."""
        # A conversation's opening follows its own policy (only a NewEvent can open one).
        self._policies.learn(item for item in items if isinstance(item, NewEvent))
        if not self._policies.of:  # every conversation is kept in full: nothing to shape
            events = self.store.append(self.stream, items, self._seq)
            self._seq = events[-1].seq if events else self._seq
            return events
        drafts = [item if isinstance(item, NewEvent) else NewEvent(item) for item in items]
        kept = [self._policies.shape(draft) for draft in drafts]
        appended = iter(self.store.append(self.stream, [k for k in kept if k], self._seq))
        events = []
        for draft, stored in zip(drafts, kept, strict=True):
            if stored is None:  # not in the log: placed after the last event that is
                at = events[-1].at if events else self.store.clock()
                events.append(draft.unstored(self.stream, self._seq, at))
                continue
            event = next(appended)
            self._seq = event.seq
            if stored.body is not draft.body:
                event = msgspec.structs.replace(event, body=draft.body)
            events.append(event)
        return events

    def publish(self, notice: Transient) -> None:
        """Hand a transient notification to the live feeds (it is never stored)."""
        with self._lock:
            for feed in self._feeds:
                if feed.transient:
                    feed.put(notice)

    def feed(
        self, transient: bool = True, limit: int = DEFAULT_FEED_LIMIT, kinds: Kinds | None = None
    ) -> Feed:
        """Return a live feed of what is recorded from now on, holding at most ``limit`` items
        its reader has not taken.

        Transient notifications are handed to it too, unless ``transient`` is false; events
        only of ``kinds``, if given.
        """
        with self._lock:
            feed = Feed(self, transient, limit, kinds)
            self._feeds.append(feed)
        return feed

    def _unsubscribe(self, feed: Feed) -> None:
        with self._lock:
            if feed in self._feeds:
                self._feeds.remove(feed)


class _Listener:
    """An actor that folds what the others record, and how far it has taken it."""

    __slots__ = ("nudged", "ref", "taken")

    def __init__(self, ref: Any, taken: int) -> None:
        self.ref = ref
        self.taken = taken
        self.nudged = False  # told CatchUp, and has not taken anything since


class HeldDeltas:
    """Transient notifications held back until what they follow is in the feeds.

    A model call starts before its ``ModelRequested`` is durable; its text deltas wait here
    until the conversation has recorded it, so subscribers always see the record first.
    """

    def __init__(self, publish: Callable[[Transient], None]) -> None:
        self._publish = publish
        self._lock = threading.Lock()
        self._held: list[Transient] | None = []

    def publish(self, delta: Transient) -> None:
        """Publish ``delta`` now, or hold it until :meth:`open`."""
        with self._lock:  # held or not, deltas reach the feeds in the order they arrived
            if self._held is not None:
                self._held.append(delta)
            else:
                self._publish(delta)

    def open(self) -> None:
        """Publish what was held, and from now on publish at once."""
        with self._lock:
            held, self._held = self._held or [], None
            for delta in held:
                self._publish(delta)

    def discard(self) -> None:
        """Drop what was held and what comes later (a compaction's summary is not shown as
        it streams: ``HistoryCompacted`` carries it)."""
        with self._lock:
            self._held = None
            self._publish = _drop


def _drop(delta: Transient) -> None:
    del delta
