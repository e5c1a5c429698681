"""The session's serial timeline of tasks (seed 000): a fold of its events, and its decisions.

At most one task runs in a session. ``pending`` is a FIFO of ``TaskPlan``s; an interrupting tool
puts its plans (the target's task, then the caller's continuation) at the front, in order, ahead
of tasks that were waiting. Everything here is a pure function of the log: the ``Scheduler``
actor appends what ``decide`` returns and folds it back with ``evolve``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import msgspec
import pykka

from plait.actors.messages import (
    Abort,
    Dispatch,
    Enqueue,
    Interrupt,
    Recorded,
    RunTask,
    TaskEnded,
)
from plait.events.types import (
    Event,
    NewEvent,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.events.values import Content, TaskPlan, as_text

__all__ = [
    "Scheduler",
    "SchedulerState",
    "TaskResult",
    "chain_to_drop",
    "continuation_output",
    "evolve",
    "next_task",
]


log = logging.getLogger("plait")

INTERRUPTED_BY = {"user": "interrupted by the user", "close": "interrupted by the close"}
"""What an interrupt's records say, for people (its ``cause`` says it for programs)."""


class TaskResult(msgspec.Struct, frozen=True):
    """How a task ended, kept for the continuation that reports it."""

    last_assistant_message: Content | None = None
    """Its final answer."""
    error: str | None = None
    """Why it ended without one."""


class SchedulerState(msgspec.Struct):
    """What the scheduler knows: the running task and the waiting ones."""

    pending: list[TaskPlan] = []
    """Tasks waiting, in the order they will run."""
    running: TaskPlan | None = None
    """The task running now."""
    front: int = 0
    """Where the next front-enqueued plan goes (plans of one interrupt keep their order)."""
    results: dict[str, TaskResult] = {}
    """How finished tasks that a continuation waits for ended, by task id."""


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
        if plan is not None and plan.closure is not None:
            state.results.pop(plan.closure.target_task_id or "", None)
    elif isinstance(body, TaskCompleted | TurnAborted):
        running = state.running
        if running is not None and running.task_id == event.task_id:
            state.running = None
            if running.chain_depth > 0 and running.closure is None:
                # The target of an interrupt: its continuation reports how it ended.
                if isinstance(body, TaskCompleted):
                    result = TaskResult(body.last_assistant_message)
                else:
                    result = TaskResult(
                        error=f"the task ended early ({body.reason}) {body.detail}".strip()
                    )
                state.results[running.task_id] = result
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


def continuation_output(state: SchedulerState, plan: TaskPlan) -> str | None:
    """Return the JSON output a continuation hands back to the model (seed 000 payloads)."""
    closure = plan.closure
    if closure is None:
        return None
    result = state.results.get(closure.target_task_id or "")
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


class Scheduler(pykka.ThreadingActor):
    """The session's single flight: starts one task at a time, in ``pending`` order."""

    def __init__(self, journal: Any, session: Any, past: list[Event]) -> None:
        super().__init__()
        self.journal = journal
        self.session = session
        self.state = SchedulerState()
        for event in past:
            evolve(self.state, event)

    def on_receive(self, message: Any) -> Any:
        try:
            return self._receive(message)
        except Exception:
            log.exception("scheduler of session %s: %s failed", self.journal.stream, message)
            return None

    def _receive(self, message: Any) -> Any:
        match message:
            case Recorded(events=events):
                for event in events:
                    evolve(self.state, event)
            case Enqueue(plans=plans):
                self._enqueue(plans)
            case TaskEnded():
                self._maybe_start()
            case Interrupt(cause=cause):
                self._interrupt(cause)
            case "state":
                return msgspec.structs.replace(self.state)
            case "kick":
                self._maybe_start()
        return None

    def _record(self, items: list[NewEvent]) -> None:
        for event in self.journal.record(items, origin=self.actor_ref):
            evolve(self.state, event)

    def _enqueue(self, plans: tuple[TaskPlan, ...]) -> None:
        """Queue ``plans``; if the timeline is free, start the next task in the same
        transaction (one fsync for both)."""
        queued = [NewEvent(TaskEnqueued(p), p.conversation_id, p.task_id) for p in plans]
        nxt = None
        if self.state.running is None:
            nxt = self.state.pending[0] if self.state.pending else plans[0]
        self._start(nxt, queued)

    def _maybe_start(self) -> None:
        self._start(next_task(self.state), [])

    def _start(self, plan: TaskPlan | None, before: list[NewEvent]) -> None:
        if plan is None:
            if before:
                self._record(before)
            return
        started = [NewEvent(TaskStarted(), plan.conversation_id, plan.task_id)]
        output = continuation_output(self.state, plan)  # before TaskStarted forgets the result
        if plan.closure is not None and output is not None:
            # A continuation starts by answering the call it closes, in the same group: a
            # crash keeps both or neither.
            answer = ToolCallCompleted(plan.closure.call_id, output)
            started.append(NewEvent(answer, plan.conversation_id, plan.task_id))
        self._record([*before, *started])
        self.session.tell(Dispatch(RunTask(plan)))

    def _interrupt(self, cause: Literal["user", "close"]) -> None:
        why = INTERRUPTED_BY[cause]
        dropped: list[NewEvent] = []
        for plan in chain_to_drop(self.state):
            if plan.closure is not None:
                # The call this continuation would have answered is answered now, so the
                # caller's history stays valid for its next model request.
                output = ToolCallCompleted(
                    plan.closure.call_id, "aborted: interrupted", "error", aborted_by=cause
                )
                dropped.append(NewEvent(output, plan.conversation_id, plan.task_id))
            reason = TaskDropped(why, cause)
            dropped.append(NewEvent(reason, plan.conversation_id, plan.task_id))
        if dropped:
            self._record(dropped)
        running = self.state.running
        if running is not None:
            self.session.tell(Abort(running.task_id, "interrupted", cause, why))
        else:
            self._maybe_start()
