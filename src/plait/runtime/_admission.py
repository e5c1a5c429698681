"""``Admission``: at most ``max_active_sessions`` sessions have running actors at once.

A session needs a place to start its actors (a new one, or a passive one a call wakes). When
every place is taken, the least recently used idle session is passivated to make one; when none
is idle, callers wait in the order they came (threads on an event, asyncio code on a future of
its loop, so a waiting ``arun`` holds no thread) until a session goes idle, passivates or closes.
Nothing is dropped: a waiting task is queued once its session has a place.

So a place is held by work: an idle session keeps its actors only until another needs the place.
``free`` counts the places work may still take, and a caller that cannot wait (the owner's
thread, with a command for a passive session) asks ``try_enter``; one that finds none (or,
``want``, more work than places) is told by ``on_free`` when one may be free again
(docs/processes.md#capacity).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection
from typing import Protocol

from plait._errors import ConfigError
from plait.actors import Promise

__all__ = ["Admission", "Placed"]


class Placed(Protocol):
    """A session that takes a place (its ``Placed``): what admission asks of it."""

    @property
    def session_id(self) -> str: ...

    def idle_now(self) -> bool: ...

    def idle_for(self) -> float: ...

    def passivate_if_free(self) -> bool: ...


class _Ticket:
    """One caller waiting for a place: woken when it may try again."""

    def __init__(self) -> None:
        self.woken: Promise[None] = Promise()
        """Settled by ``wake``; the caller takes a new one before it tries again."""

    def wake(self) -> None:
        self.woken.settle(None)

    def rearm(self) -> None:
        """Take a new wake-up, before trying again: a wake from now on is not missed."""
        self.woken = Promise()


class Admission:
    """Places for sessions' actors; ``None`` places: as many as there are sessions."""

    def __init__(self, most: int | None, on_free: Callable[[], object] = lambda: None) -> None:
        if most is not None and most < 1:
            raise ConfigError(f"max_active_sessions: expected at least 1, got {most}")
        self.most = most
        self._lock = threading.Lock()
        self._active: dict[str, Placed] = {}
        self._queue: deque[_Ticket] = deque()
        self._on_free = on_free
        self._wanted = False  # someone found no place without waiting: tell on_free of the next

    @property
    def active(self) -> int:
        """How many sessions hold a place."""
        return len(self._active)

    def enter(self, handle: Placed) -> None:
        """Take a place for ``handle`` (hold its lock), waiting in order for one."""
        ticket = None
        try:
            while not self._try(handle, ticket):
                if ticket is None:
                    ticket = self._wait_in_line()
                    continue
                ticket.woken.wait()
                ticket.rearm()
        finally:
            self._leave_line(ticket)

    async def aenter(self, handle: Placed) -> None:
        """``enter`` for asyncio code: waits on the loop, holding no thread."""
        ticket = None
        try:
            while not self._try(handle, ticket):
                if ticket is None:
                    ticket = self._wait_in_line()
                    continue
                await ticket.woken
                ticket.rearm()
        finally:
            self._leave_line(ticket)

    def free(self, pending: Collection[str] = ()) -> int | None:
        """How many more sessions may start work now (``None``: no bound): the places not held
        by a session with work (or, ``pending``, commands on their way), less those waited for."""
        if self.most is None:
            return None
        with self._lock:
            held = self._active.values()
            busy = sum(1 for h in held if not h.idle_now() or h.session_id in pending)
            return max(self.most - busy - len(self._queue), 0)

    def want(self) -> None:
        """Have ``on_free`` tell of the next place that may be free (more work waits)."""
        with self._lock:
            self._wanted = True

    def try_enter(self, handle: Placed) -> bool:
        """Take a place for ``handle`` if one is free (or an idle session's) and nobody waits
        in line; never wait. With none, ``on_free`` tells when one may be."""
        if self._try(handle, None):
            return True
        self.want()
        return False

    def leave(self, handle: Placed) -> None:
        """Give back ``handle``'s place (its actors stopped)."""
        with self._lock:
            if self._active.pop(handle.session_id, None) is not None and self._queue:
                self._queue[0].wake()
        self._freed()

    def went_idle(self) -> None:
        """A session has nothing running or queued: the first in line may take its place."""
        with self._lock:
            if self._queue:
                self._queue[0].wake()
        self._freed()

    def _freed(self) -> None:
        """Tell ``on_free`` that a place may be free, if someone found none."""
        with self._lock:
            wanted, self._wanted = self._wanted, False
        if wanted:
            self._on_free()

    def _try(self, handle: Placed, ticket: _Ticket | None) -> bool:
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

    def _wait_in_line(self) -> _Ticket:
        ticket = _Ticket()
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
