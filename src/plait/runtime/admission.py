"""``Admission``: at most ``max_active_sessions`` sessions have running actors at once.

A session needs a place to start its actors (a new one, or a passive one a call wakes). When
every place is taken, the least recently used idle session is passivated to make one; when none
is idle, callers wait in the order they came (threads on an event, asyncio code on a future of
its loop, so a waiting ``arun`` holds no thread) until a session goes idle, passivates or closes.
Nothing is dropped: a waiting task is queued once its session has a place.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import TYPE_CHECKING

from plait.errors import ConfigError

if TYPE_CHECKING:
    from plait.runtime.host import SessionHost

__all__ = ["Admission"]


class _Ticket:
    """One caller waiting for a place: woken when it may try again."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.event = threading.Event()
        self.future: asyncio.Future[None] | None = None

    def wake(self) -> None:
        self.event.set()  # first: a reader that sees it unset is sure to see the future next
        future = self.future
        if self.loop is not None and future is not None:
            self.loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Admission:
    """Places for sessions' actors; ``None`` places: as many as there are sessions."""

    def __init__(self, most: int | None) -> None:
        if most is not None and most < 1:
            raise ConfigError(f"max_active_sessions: expected at least 1, got {most}")
        self.most = most
        self._lock = threading.Lock()
        self._active: dict[str, SessionHost] = {}
        self._queue: deque[_Ticket] = deque()

    @property
    def active(self) -> int:
        """How many sessions hold a place."""
        return len(self._active)

    def enter(self, handle: SessionHost) -> None:
        """Take a place for ``handle`` (hold its lock), waiting in order for one."""
        ticket = None
        try:
            while not self._try(handle, ticket):
                if ticket is None:
                    ticket = self._wait_in_line(None)
                    continue
                ticket.event.wait()
                ticket.event.clear()
        finally:
            self._leave_line(ticket)

    async def aenter(self, handle: SessionHost) -> None:
        """``enter`` for asyncio code: waits on the loop, holding no thread."""
        loop = asyncio.get_running_loop()
        ticket = None
        try:
            while not self._try(handle, ticket):
                if ticket is None:
                    ticket = self._wait_in_line(loop)
                    continue
                if not ticket.event.is_set():
                    ticket.future = loop.create_future()
                    if not ticket.event.is_set():
                        await ticket.future
                ticket.event.clear()
        finally:
            self._leave_line(ticket)

    def leave(self, handle: SessionHost) -> None:
        """Give back ``handle``'s place (its actors stopped)."""
        with self._lock:
            if self._active.pop(handle.session_id, None) is not None and self._queue:
                self._queue[0].wake()

    def went_idle(self) -> None:
        """A session has nothing running or queued: the first in line may take its place."""
        with self._lock:
            if self._queue:
                self._queue[0].wake()

    def _try(self, handle: SessionHost, ticket: _Ticket | None) -> bool:
        """Take a place if one is free (or can be freed) and nobody waits ahead."""
        while True:
            with self._lock:
                sid = handle.session_id
                if sid in self._active:
                    return True
                if self._queue and self._queue[0] is not ticket:
                    return False
                if self.most is None or len(self._active) < self.most:
                    self._active[sid] = handle
                    return True
                idle = [h for h in self._active.values() if h is not handle and h.idle_now()]
            idle.sort(key=lambda h: h.idle_for(), reverse=True)  # least recently used first
            if not any(victim.passivate_if_free() for victim in idle):
                return False

    def _wait_in_line(self, loop: asyncio.AbstractEventLoop | None) -> _Ticket:
        ticket = _Ticket(loop)
        with self._lock:
            self._queue.append(ticket)
            if len(self._queue) == 1:
                ticket.wake()  # first in line: try again at once
        return ticket

    def _leave_line(self, ticket: _Ticket | None) -> None:
        if ticket is None:
            return
        with self._lock:
            head = bool(self._queue) and self._queue[0] is ticket
            if ticket in self._queue:
                self._queue.remove(ticket)
            if head and self._queue:
                self._queue[0].wake()  # the next in line may find a place too
