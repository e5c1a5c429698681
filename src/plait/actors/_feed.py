"""A session's live feed: its events as they are recorded, and the transient deltas.

A ``Journal`` hands each feed what it records (``put``); a reader takes it from a thread or
from asyncio code, and a reader that falls too far behind is told where to read the log from.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

from plait.actors._bridge import Promise
from plait.events import Body, Event, FeedLagged, Transient

if TYPE_CHECKING:
    from plait.events import EventStore

__all__ = ["DEFAULT_FEED_LIMIT", "Feed", "Kinds", "Lost"]


class _Closed:
    """Put in a feed to close it (``CLOSED``)."""


CLOSED = _Closed()


class Lost(NamedTuple):
    """Put in a feed to end it with an error: the session left this process (its lease was
    taken over); its reader gets ``error`` raised."""

    error: Exception


DEFAULT_FEED_LIMIT = 10_000
"""How many items a feed holds for a reader that does not take them, before it lags."""


class Source(Protocol):
    """What a feed is fed by (a ``Journal``): its session, where it stands, the log to read
    again from, and its list of feeds."""

    store: EventStore
    stream: str

    @property
    def last_seq(self) -> int: ...

    def unsubscribe(self, feed: Feed) -> None: ...


class Feed(Iterator["Event | Transient"]):
    """A live view of a session: its events as they are recorded, and transient deltas.

    Read it from a thread (``get``, iteration) or from asyncio code (``aget``, ``async for``):
    an asyncio reader awaits a ``Promise`` on its own loop, settled by whoever records, so any
    number of them cost no thread. It holds at most ``limit`` items: a reader that falls that
    far behind gets one ``FeedLagged`` in place of what did not fit, then what is recorded
    after it has caught up (``catch_up`` reads the gap from the log).
    """

    def __init__(
        self,
        journal: Source,
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
        self._queue: queue.SimpleQueue[Event | Transient | Lost | _Closed] = queue.SimpleQueue()
        self._closed = False
        self._waiter: Promise[None] | None = None
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

    def put(self, item: Event | Transient | Lost | _Closed) -> None:
        if self._lagging:
            return
        wakes = True
        if isinstance(item, Event):
            self._last_seq = item.seq
            if self.kinds is not None:
                if not isinstance(item.body, self.kinds.held):
                    return
                wakes = isinstance(item.body, self.kinds.waking)
        if not isinstance(item, Lost | _Closed) and self._queue.qsize() >= self.limit:
            self._lagging = wakes = True
            item = FeedLagged(self._journal.stream, self._last_seq_before(item))
        self._queue.put(item)
        waiter = self._waiter
        if waiter is not None and wakes:
            self._waiter = None
            waiter.settle(None)

    def _last_seq_before(self, item: Event | Transient) -> int:
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
            waiter: Promise[None] = Promise()
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
            finally:  # woken, timed out or cancelled: this promise is done with
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
            if isinstance(item, _Closed):
                self._closed = True
                return None
            if isinstance(item, Lost):
                self._closed = True
                raise item.error
            if isinstance(item, FeedLagged):
                self._lagging = False  # taken: what is recorded from now on fits again
            elif isinstance(item, Event) and item.seq <= self._seen_upto:
                continue  # catch_up handed it out from the log
            return item
        return None

    def __next__(self) -> Event | Transient:
        item = self.get()
        if item is None:
            raise StopIteration
        return item

    def fail(self, error: Exception) -> None:
        """End the feed with ``error``: its reader gets it raised, once it has read the rest."""
        self._lagging = False
        self.put(Lost(error))

    def close(self) -> None:
        """Stop the feed; a blocked ``get`` or ``aget`` returns ``None``."""
        self._journal.unsubscribe(self)
        self._lagging = False
        self.put(CLOSED)  # wakes a blocked reader
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
