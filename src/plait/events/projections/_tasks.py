"""The session's task queue, folded from its events: what runs, what waits, what a continuation
reports (docs/conversations.md#the-single-timeline).

At most one task runs in a session. ``pending`` is a FIFO of ``TaskPlan``s; an interrupting tool
puts its plans (the target's task, then the caller's continuation) at the front, in order, ahead
of tasks that were waiting. A running session folds it once, in its journal, as each group is
recorded (``actors/_journal.py``): its scheduler decides from that fold, its conversations end
their tasks and the runtime sees it idle by it. Recovery and the command line fold it from the
log. There is no other queue (a history keeps only the plans not yet started, to know what input
a started task brings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from plait.events._types import (
    Event,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    TurnAborted,
)
from plait.events._values import Closure, Content, TaskPlan, as_text
from plait.events.projections._base import Projection

__all__ = [
    "TASKS",
    "QueueSnapshot",
    "TaskQueue",
    "TaskQueueProjection",
    "TaskResult",
    "chain_to_drop",
    "continuation_output",
    "handoff_answer",
    "next_task",
    "task_queue",
]


class TaskResult(msgspec.Struct, frozen=True):
    """How a task ended, kept for the continuation that reports it."""

    last_assistant_message: Content | None = None
    """Its final answer."""
    error: str | None = None
    """Why it ended without one."""


class TaskQueue(msgspec.Struct):
    """State of ``TaskQueueProjection``: the running task and the waiting ones."""

    pending: list[TaskPlan] = []
    """Tasks waiting, in the order they will run."""
    running: TaskPlan | None = None
    """The task running now."""
    front: int = 0
    """Where the next front-enqueued plan goes (plans of one interrupt keep their order)."""
    results: dict[str, TaskResult] = {}
    """How finished tasks that a continuation waits for ended, by task id."""
    known: dict[str, None] = {}
    """Every task id the session has enqueued, whatever became of the task: a command that
    names one again is not queued twice. A few dozen bytes a task, beside the histories that
    hold at least its input (docs/processes.md#each-command-takes-effect-once). A dict, not a
    set, for its order: a saved state is the same bytes however its events were folded."""

    def snapshot(self) -> QueueSnapshot:
        """A frozen copy of what runs and waits, safe to hand to another thread."""
        return QueueSnapshot(self.running, tuple(self.pending))


class QueueSnapshot(msgspec.Struct, frozen=True):
    """What runs and waits in a session at one moment; it does not change afterwards."""

    running: TaskPlan | None = None
    """The task running."""
    pending: tuple[TaskPlan, ...] = ()
    """The tasks waiting, in the order they will run."""

    @property
    def idle(self) -> bool:
        """Whether nothing runs and nothing waits."""
        return self.running is None and not self.pending


class TaskQueueProjection(Projection[TaskQueue]):
    """Folds a session's events into its ``TaskQueue``."""

    state_type = TaskQueue

    def initial(self) -> TaskQueue:
        return TaskQueue()

    def handlers(self) -> dict[type[Any], Callable[[TaskQueue, Event], None]]:
        return {
            TaskEnqueued: _enqueued,
            TaskStarted: _started,
            TaskCompleted: _ended,
            TurnAborted: _ended,
            TaskDropped: _dropped,
        }


def _enqueued(state: TaskQueue, event: Event) -> None:
    body = event.body
    assert isinstance(body, TaskEnqueued)
    state.known[body.plan.task_id] = None
    if body.front:
        state.pending.insert(state.front, body.plan)
        state.front += 1
    else:
        state.pending.append(body.plan)


def _started(state: TaskQueue, event: Event) -> None:
    plan = _take(state, event.task_id)
    state.running = plan
    state.front = 0
    if plan is not None and plan.closure is not None:
        state.results.pop(plan.closure.target_task_id or "", None)


def _ended(state: TaskQueue, event: Event) -> None:
    running = state.running
    if running is None or running.task_id != event.task_id:
        return
    body = event.body
    assert isinstance(body, (TaskCompleted, TurnAborted))
    state.running = None
    if running.chain_depth > 0 and running.closure is None:
        # The target of an interrupt: its continuation reports how it ended.
        if isinstance(body, TaskCompleted):
            result = TaskResult(body.last_assistant_message)
        else:
            result = TaskResult(error=f"the task ended early ({body.reason}) {body.detail}".strip())
        state.results[running.task_id] = result


def _dropped(state: TaskQueue, event: Event) -> None:
    _take(state, event.task_id)


def _take(state: TaskQueue, task_id: str | None) -> TaskPlan | None:
    pending = state.pending
    if pending and pending[0].task_id == task_id:  # the usual case: the first one
        state.front = max(0, state.front - 1)
        return pending.pop(0)
    for i, plan in enumerate(pending):
        if plan.task_id == task_id:
            state.front = max(0, state.front - 1) if i < state.front else state.front
            return state.pending.pop(i)
    return None


TASKS = TaskQueueProjection()


def task_queue(events: Iterable[Event]) -> TaskQueue:
    """Fold ``events`` into a new ``TaskQueue``."""
    return TASKS.fold(events)


def next_task(state: TaskQueue) -> TaskPlan | None:
    """Return the task to start now, if nothing runs and something waits."""
    if state.running is None and state.pending:
        return state.pending[0]
    return None


def chain_to_drop(state: TaskQueue) -> list[TaskPlan]:
    """Return the waiting tasks an interrupt chain left behind (targets and continuations).

    An interrupt ends the running task and drops these; tasks the user queued stay.
    """
    return [plan for plan in state.pending if plan.chain_depth > 0]


def continuation_output(state: TaskQueue, plan: TaskPlan) -> str | None:
    """Return the JSON output a continuation hands back to the model
    (docs/conv-tools.md#results)."""
    closure = plan.closure
    if closure is None:
        return None
    return handoff_answer(closure, state.results.get(closure.target_task_id or ""))


def handoff_answer(closure: Closure, result: TaskResult | None) -> str:
    """Return the JSON answer of the call ``closure`` names, given how its target's task
    ended (``None``: it did not run) (docs/conv-tools.md#results)."""
    payload: dict[str, Any] = {"conversation_id": closure.target_conversation_id}
    if closure.first_user_message is not None:
        payload["first_user_message"] = as_text(closure.first_user_message)
    if closure.first_items_count is not None:
        payload["first_items_count"] = closure.first_items_count
    if result is None or result.error is not None:
        payload["last_assistant_message"] = None
        payload["error"] = result.error if result is not None else "the task did not run"
    else:
        payload["last_assistant_message"] = result.last_assistant_message
    return msgspec.json.encode(payload).decode()
