"""``Timers``: one daemon thread that runs named jobs, periodic or once, when they are due.

The runtime's periodic work (passivating idle sessions, expiring ``ttl`` content, looking
for followed sessions whose lease is free, renewing leases) runs as jobs of a ``Timers``,
not on a thread each that waits on an event with a timeout. A job that raises is logged and
runs again when next due; the others never notice. ``close`` stops the thread and waits for
the job in hand; the thread is a daemon and starts with the first job, so a runtime that has
none holds no thread for it, and a program is never kept alive by one.

Jobs on one thread run one after the other, so a slow one delays the rest. The runtime
therefore keeps two: ``plait-timers`` for housekeeping, whose jobs may wait on the store for
a long time (a sweep deletes content, a take-over reads a whole log) and may run late, and
``plait-heartbeat`` for the lease renewal alone, which must go out on time whatever the
others do (a lease lapses after ``lease_sec``; docs/processes.md#ownership-leases). The
threads that wait on the store itself (the owner's inbox, the followers' subscription) are
not timers: they wake on the store's own signal, not on the clock.

This is an internal type of plait, not part of its public API.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from plait._errors import ConfigError

__all__ = ["Job", "Timer", "Timers"]

log = logging.getLogger("plait")

Job = Callable[[], "float | None"]
"""A timer's work; it may return how many seconds until its next run (a retry sooner, say)."""


class Timer:
    """A job's place in its ``Timers``: when it runs next, until cancelled."""

    def __init__(self, name: str, job: Job, interval: float | None) -> None:
        self.name = name
        """What the job does, as logs name it."""
        self.interval = interval
        """Seconds from one run's start to the next (``None``: it runs once)."""
        self._job = job
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        """Whether it will not run again (cancelled, run once, or its ``Timers`` closed)."""
        return self._cancelled

    def cancel(self) -> None:
        """Run it no more (a run under way ends as it does)."""
        self._cancelled = True

    def run(self) -> float | None:
        """Run the job once; return when it asks to run next, ``None`` for its interval."""
        try:
            return self._job()
        except Exception:  # the other jobs go on; this one runs when next due
            log.exception("timer job %r failed", self.name)
            return None


class Timers:
    """Named jobs run, each when due, on one daemon thread started by the first."""

    def __init__(self, name: str) -> None:
        """``name``: its thread's."""
        self._name = name
        self._changed = threading.Condition()
        self._due: list[tuple[float, int, Timer]] = []  # a heap, soonest first
        self._order = itertools.count()  # among jobs due at once: the first scheduled first
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def running(self) -> bool:
        """Whether its thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def every(self, interval: float, job: Job, name: str, *, first: float | None = None) -> Timer:
        """Run ``job`` every ``interval`` seconds (start to start; a run that overruns is
        followed by the next at once), the first time after ``first`` seconds (``interval``
        by default), until the returned ``Timer`` is cancelled. A run that returns a number
        runs next that many seconds after it ended."""
        if interval <= 0:
            raise ConfigError(f"timer {name!r}: its interval must be positive, got {interval:g}")
        return self._add(Timer(name, job, interval), interval if first is None else first)

    def call_later(self, delay: float, job: Job, name: str) -> Timer:
        """Run ``job`` once, after ``delay`` seconds (unless cancelled first)."""
        return self._add(Timer(name, job, None), delay)

    def close(self, timeout: float | None = None) -> None:
        """Run no more jobs; wait up to ``timeout`` s for the one under way (not from a job)."""
        with self._changed:
            self._closed = True
            for _, _, timer in self._due:
                timer.cancel()
            self._due.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _add(self, timer: Timer, delay: float) -> Timer:
        with self._changed:
            if self._closed:  # closing: nothing more runs
                timer.cancel()
                return timer
            self._push(time.monotonic() + max(delay, 0.0), timer)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        return timer

    def _push(self, due: float, timer: Timer) -> None:
        heapq.heappush(self._due, (due, next(self._order), timer))
        self._changed.notify_all()

    def _run(self) -> None:
        with self._changed:
            while not self._closed:
                if not self._due:
                    self._changed.wait()
                    continue
                due, _, timer = self._due[0]
                started = time.monotonic()
                if timer.cancelled:
                    heapq.heappop(self._due)
                    continue
                if due > started:
                    self._changed.wait(due - started)
                    continue
                heapq.heappop(self._due)
                self._changed.release()  # others schedule and cancel while it runs
                try:
                    asked = timer.run()
                finally:
                    self._changed.acquire()
                if timer.interval is None or self._closed:
                    timer.cancel()
                elif not timer.cancelled:
                    nxt = started + timer.interval if asked is None else time.monotonic() + asked
                    self._push(nxt, timer)
