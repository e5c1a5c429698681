"""``SessionRelease``: how a ``SessionHandle`` hands its session back, for another process
to own: after its queued work (a drain), or at once with a grace period for the running task
(a process that stops on purpose, docs/processes.md#stopping)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any, cast

from plait.actors.feed import Feed
from plait.actors.journal import Journal
from plait.actors.messages import Stop
from plait.errors import LeaseLostError
from plait.events.projections.tasks import QueueSnapshot
from plait.runtime.outcome import await_outcome
from plait.runtime.recovery import forced_close

if TYPE_CHECKING:
    from plait.runtime.handle import SessionHandle
    from plait.runtime.runtime import Runtime

__all__ = ["SessionRelease"]


class SessionRelease:
    """The handing-back part of ``SessionHandle``."""

    runtime: Runtime
    session_id: str
    _journal: Journal
    _lock: threading.RLock
    _active: bool
    _closed: bool
    _followed: bool
    _actor: Any

    if TYPE_CHECKING:  # the SessionHandle's

        def _follow(self, everything: bool = False) -> Feed: ...
        def _queue_now(self, timeout: float) -> QueueSnapshot | None: ...
        def _stop_actors(self, timeout: float, error: Exception | None = None) -> None: ...

    def release(
        self, timeout: float = 60.0, *, grace_sec: float | None = None, reason: str = ""
    ) -> bool:
        """Hand the session back for another process to own (a process that drains): take no
        more work for it, let what is queued run for up to ``timeout`` seconds, stop the actors,
        release the lease. Return whether nothing was left waiting (what was is in the log, for
        the next owner; a task cut off ends ``crashed`` there).

        With ``grace_sec`` (a process that stops on purpose, docs/processes.md#stopping), no
        waiting task starts: the running one is given ``grace_sec`` seconds to end, then is
        cut at the checkpoint it is at, ``TurnAborted(cause="shutdown")`` with ``reason`` as
        its detail, and the lease is released at once, so that the next process goes on with
        the session without waiting for it to lapse."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            if self._followed:  # someone else's: only the following ends
                self.runtime.followers.remove(cast("SessionHandle", self))
                self.runtime._sessions.pop(self.session_id, None)
                return True
        deadline = time.monotonic() + timeout
        with self._follow() as feed:
            if grace_sec is not None:
                self._stop_running(feed, grace_sec, timeout, reason or "the process stopped")
            while grace_sec is None and not self._journal.idle:
                if (left := deadline - time.monotonic()) <= 0:
                    break
                feed.get(timeout=min(left, 1.0))
        with self._lock:
            if self._active:
                self._stop_actors(timeout)
        if grace_sec is not None:  # an actor stuck past the timeout: its task ended for it
            ended = forced_close(self.runtime.store.read(self.session_id), timeout, "stop")
            if ended:
                with contextlib.suppress(LeaseLostError):
                    self._journal.record_last(ended)
        idle = self._journal.idle
        self.runtime._sessions.pop(self.session_id, None)
        self.runtime.owner.release(self.session_id, idle=idle)
        return idle

    def _stop_running(self, feed: Feed, grace_sec: float, timeout: float, reason: str) -> None:
        """Give the running task ``grace_sec`` to end, then start nothing more and cut what
        runs (``Stop``); return once its end is recorded, or ``timeout`` has passed."""
        with self._lock:
            state = self._queue_now(timeout) if self._active else None
        if state is None:
            return  # passive, or broken: nothing runs that an actor could end
        if state.running is not None and grace_sec > 0:
            await_outcome(feed, state.running.task_id, grace_sec, raise_timeout=False)
        with self._lock:
            if not self._active:
                return
            self._actor.tell(Stop(reason))
            state = self._queue_now(timeout)  # after the Stop: what it cut, if anything
        if state is not None and state.running is not None:
            await_outcome(feed, state.running.task_id, timeout, raise_timeout=False)
