"""The session's serial timeline of tasks (seed 000): a fold of its events, and its decisions.

At most one task runs in a session. ``pending`` is a FIFO of ``TaskPlan``s; an interrupting tool
puts its plans (the target's task, then the caller's continuation) at the front, in order, ahead
of tasks that were waiting. Everything here is a pure function of the log: the ``Scheduler``
actor appends what ``decide`` returns and folds it back with ``evolve``.
"""

from __future__ import annotations

import msgspec

from plait.events.types import (
    Event,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    TurnAborted,
)
from plait.events.values import TaskPlan

__all__ = ["SchedulerState", "chain_to_drop", "evolve", "next_task"]


class SchedulerState(msgspec.Struct):
    """What the scheduler knows: the running task and the waiting ones."""

    pending: list[TaskPlan] = []
    """Tasks waiting, in the order they will run."""
    running: TaskPlan | None = None
    """The task running now."""
    front: int = 0
    """Where the next front-enqueued plan goes (plans of one interrupt keep their order)."""


def evolve(state: SchedulerState, event: Event) -> SchedulerState:
    """Fold one event into the scheduler state (in place) and return it."""
    body = event.body
    if isinstance(body, TaskEnqueued):
        if body.front:
            state.pending.insert(state.front, body.plan)
            state.front += 1
        else:
            state.pending.append(body.plan)
    elif isinstance(body, TaskStarted):
        plan = _take(state, event.task_id)
        state.running = plan
        state.front = 0
    elif isinstance(body, TaskCompleted | TurnAborted):
        if state.running is not None and state.running.task_id == event.task_id:
            state.running = None
    elif isinstance(body, TaskDropped):
        _take(state, event.task_id)
    return state


def _take(state: SchedulerState, task_id: str | None) -> TaskPlan | None:
    for i, plan in enumerate(state.pending):
        if plan.task_id == task_id:
            state.front = max(0, state.front - 1) if i < state.front else state.front
            return state.pending.pop(i)
    return None


def next_task(state: SchedulerState) -> TaskPlan | None:
    """Return the task to start now, if nothing runs and something waits."""
    if state.running is None and state.pending:
        return state.pending[0]
    return None


def chain_to_drop(state: SchedulerState) -> list[TaskPlan]:
    """Return the waiting tasks an interrupt chain left behind (targets and continuations).

    A user interrupt ends the running task and drops these; tasks the user queued stay.
    """
    return [plan for plan in state.pending if plan.chain_depth > 0]
