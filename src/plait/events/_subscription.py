"""Live tails: a ``Subscription`` hands out every event after a position, in global order, once.

It reads what is stored, then blocks on its ``Waiter`` until the store may hold more. A waiter's
``token`` is taken before each read, so a commit landing between the read and the wait is never
slept through. Backends supply the waiter: an in-process condition (memory), SQLite's
``data_version`` for other processes' commits, PostgreSQL's ``LISTEN``.
"""

from __future__ import annotations

import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator

from plait.events._types import Event

__all__ = ["ConditionWaiter", "Signal", "Subscription", "Waiter"]


class Waiter(ABC):
    """Blocks a subscription until the store may hold new events."""

    @abstractmethod
    def token(self) -> int:
        """Return a value that changes whenever an append may have committed."""

    @abstractmethod
    def wait(self, token: int, timeout: float | None) -> None:
        """Return once ``token()`` differs from ``token``, or after ``timeout`` seconds."""

    def close(self) -> None:  # noqa: B027 - most waiters hold nothing
        """Release what the waiter holds."""


class Signal:
    """A count that moves each time something happens through a store object (an append, a
    command stored), the condition its waiters are told on, and who else hears of it."""

    def __init__(self, *hearing: Signal) -> None:
        """``hearing``: signals it moves with, each time one of them moves."""
        self.count = 0
        self.changed = threading.Condition()
        # Told after each move, from the moving thread; held weakly, so a waiter that is
        # collected stops hearing (copied on write: ``notify`` reads it without the lock).
        self._heard_by: list[weakref.WeakMethod[Callable[[], object]]] = []
        self._hearing = hearing  # held while it is: one it hears may hear others too
        for signal in hearing:
            signal.heard_by(self.notify)

    def notify(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()
        for ref in self._heard_by:
            if (hear := ref()) is not None:
                hear()

    def heard_by(self, hear: Callable[[], object]) -> None:
        """Call ``hear`` (a bound method, held weakly) after each move, on the moving thread."""
        with self.changed:
            alive = [ref for ref in self._heard_by if ref() is not None]
            self._heard_by = [*alive, weakref.WeakMethod(hear)]

    @classmethod
    def any_of(cls, first: Signal, *more: Signal) -> Signal:
        """A signal that moves each time one of the signals given does (while it is used)."""
        return cls(first, *more) if more else first


class ConditionWaiter(Waiter):
    """Wakes when ``signal`` moves (same process)."""

    def __init__(self, signal: Signal) -> None:
        self._signal = signal
        self._closed = False

    def token(self) -> int:
        return self._signal.count

    def wait(self, token: int, timeout: float | None) -> None:
        signal = self._signal
        with signal.changed:
            signal.changed.wait_for(lambda: self._closed or signal.count != token, timeout)

    def close(self) -> None:
        self._closed = True
        with self._signal.changed:
            self._signal.changed.notify_all()


class Subscription(Iterator[Event]):
    """Every event after a position, in global order, each once; blocks for new ones."""

    def __init__(
        self,
        read: Callable[[int], list[Event]],
        after_position: int,
        waiter: Waiter,
        whole: Callable[[list[Event]], bool] = lambda _batch: False,
    ) -> None:
        """``read`` returns a batch of the store's settled events after a position;
        ``whole(batch)`` says whether it was all there was (none left unread)."""
        self._read = read
        self._after = after_position
        self._waiter = waiter
        self._whole = whole
        self._buffer: deque[Event] = deque()
        self._closed = False
        self._handed = after_position
        # The token taken before a read that found all there was: the next read waits for it
        # to move (a read right after it would find nothing, at a round trip's cost).
        self._read_all: int | None = None

    @property
    def position(self) -> int:
        """The position of the last event handed out (or the starting position)."""
        return self._handed

    def get(self, timeout: float | None = None) -> Event | None:
        """Return the next event, waiting at most ``timeout`` seconds; ``None`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            if self._buffer:
                event = self._buffer.popleft()
                self._handed = event.position
                return event
            token, self._read_all = self._read_all, None
            if token is None:
                token = self._waiter.token()
                batch = self._read(self._after)
                if batch:
                    self._buffer.extend(batch)
                    self._after = batch[-1].position
                    if self._whole(batch):
                        self._read_all = token
                    continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            self._waiter.wait(token, remaining)
        return None

    def __next__(self) -> Event:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        """Stop the subscription; a blocked ``get`` returns ``None`` at its next wake-up."""
        if not self._closed:
            self._closed = True
            self._waiter.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
