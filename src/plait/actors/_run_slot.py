"""``RunSlot``: the session's hold on one run slot of the runtime's task gate.

The ``Scheduler`` asks it whether the task it would start may start now
(docs/processes.md#capacity). A task starts in a slot the gate gives (at once, or later: the
session waits in line, its task queued in the log, and ``wake`` tells it when a slot is held
for it). When a task ends, its slot goes back to the gate, unless the next task is of the same
interrupt chain (its caller waits on it): a task the user queued takes a slot again, behind
the sessions already in line. A slot goes back only once what the session recorded is
durable, so the task that takes it next is written after this one's end: the log never shows
more tasks running than there are slots.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from plait.actors._seams import TaskGateLike
from plait.events import TaskPlan

__all__ = ["RunSlot"]


class RunSlot:
    """One session's run slot: taken before a task starts, given back when it ended."""

    def __init__(
        self,
        gate: TaskGateLike,
        holder: str,
        wake: Callable[[], object],
        when_durable: Callable[[Callable[[Exception | None], object]], object],
    ) -> None:
        """``holder``: the session's id; ``wake``: asks the scheduler to look again (a slot is
        held for it, or the one it gave back is back); ``when_durable(then)`` calls ``then``
        once what was recorded is written."""
        self._gate = gate
        self._holder = holder
        self._wake = wake
        self._when_durable = when_durable
        self._used_by: str | None = None  # the task the slot held was taken for
        self._going: _GoingBack | None = None  # the slot given back, once durable

    def take(self, plan: TaskPlan | None, stopped: bool) -> TaskPlan | None:
        """``plan``, if it may start now (nothing runs); else ``None``: it stays queued and
        ``wake`` tells when to look again. With nothing to start (``plan`` is ``None``, or the
        session is stopping), the slot held, or the place in line, goes back."""
        if self._going is not None:
            if not self._going.done:
                return None  # its wake says when it is back
            self._going = None
        if self._used_by is not None and (plan is None or stopped or plan.chain_depth == 0):
            self._used_by = None
            going = _GoingBack(self._gate, self._holder, self._wake)
            self._when_durable(going)
            if not going.back_now():
                self._going = going
                return None
        if plan is None or stopped:
            self._gate.leave(self._holder)  # its place in line, or a slot given meanwhile
            return None
        if not self._gate.enter(self._holder, self._wake):
            return None
        self._used_by = plan.task_id
        return plan


class _GoingBack:
    """A slot given back to the gate once the session's records are durable."""

    def __init__(self, gate: TaskGateLike, holder: str, wake: Callable[[], object]) -> None:
        self._gate = gate
        self._holder = holder
        self._wake = wake
        self._lock = threading.Lock()
        self.done = False
        """Whether the slot is back."""
        self._waited = False  # the scheduler went on without it: wake it once it is back

    def __call__(self, _error: Exception | None) -> None:
        """What was recorded is durable (or will never be: the session stops either way)."""
        self._gate.leave(self._holder)
        with self._lock:
            self.done, waited = True, self._waited
        if waited:
            self._wake()

    def back_now(self) -> bool:
        """Whether the slot is back already; if not, ``wake`` tells once it is."""
        with self._lock:
            self._waited = not self.done
            return self.done
