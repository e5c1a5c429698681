"""How a task ended: ``TaskOutcome``, and following a task through its continuations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import msgspec

from plait.actors.journal import Feed
from plait.errors import ModelErrorKind, PlaitError
from plait.events.types import (
    Event,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    Transient,
    TurnAborted,
)

__all__ = ["Status", "TaskOutcome", "await_outcome", "outcome"]

Status = Literal[
    "completed",
    "truncated",
    "filtered",
    "model_error",
    "interrupted",
    "failed",
    "crashed",
    "dropped",
]


class TaskOutcome(msgspec.Struct, frozen=True):
    """How a submitted task (and the continuations it chained) ended."""

    task_id: str
    """The task that was submitted."""
    conversation_id: str
    """Where it ran."""
    status: Status
    """``completed``, or why not: ``truncated`` (the server cut the final reply at the output
    cap or the context's end) or ``filtered`` (its content filter stopped it), with the text
    it had; ``model_error`` (the model server failed: ``error_kind`` says how);
    ``interrupted``, ``failed`` (something else failed), ``crashed``, ``dropped``."""
    last_assistant_message: str | None = None
    """The final answer (what there was of it, when truncated or filtered)."""
    detail: str = ""
    """What happened, when it did not complete."""
    error_kind: ModelErrorKind | None = None
    """For ``model_error``: ``auth``, ``rate_limited``, ``unavailable``, ``bad_request``,
    ``timeout``, ``malformed`` or ``disconnected``."""

    @property
    def ok(self) -> bool:
        """Whether the task completed."""
        return self.status == "completed"


def await_outcome(
    feed: Feed,
    task_id: str,
    timeout: float | None,
    raise_timeout: bool = True,
    on_item: Callable[[Event | Transient], object] | None = None,
) -> TaskOutcome:
    """Follow ``task_id`` through the continuations it chains until the chain ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    watched = {task_id}
    awaited: set[str] = set()
    conversation = ""
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        item = feed.get(timeout=remaining if remaining is None else max(remaining, 0))
        if item is None:
            if raise_timeout:
                raise PlaitError(f"task {task_id} did not end within {timeout} s (it goes on)")
            return TaskOutcome(task_id, conversation, "interrupted", detail="timed out")
        if on_item is not None:
            on_item(item)
        if not isinstance(item, Event) or item.task_id is None:
            continue
        body = item.body
        if isinstance(body, TaskEnqueued) and body.plan.closure is not None:
            if body.plan.closure.call_id in awaited:
                watched.add(body.plan.task_id)
            continue
        if item.task_id not in watched:
            continue
        conversation = item.conversation_id or conversation
        if isinstance(body, TaskCompleted | TurnAborted):
            if isinstance(body, TurnAborted) and body.reason == "replaced":
                awaited.update(body.awaiting_call_ids)
                continue
            return outcome(task_id, conversation, body)
        if isinstance(body, TaskDropped):
            return TaskOutcome(task_id, conversation, "dropped", detail=body.reason)


CUT_OFF: dict[str, tuple[Status, str]] = {
    "length": ("truncated", "the reply was cut off at the output cap or the context's end"),
    "content_filter": ("filtered", "the model server's content filter stopped the reply"),
}


def outcome(task_id: str, conversation: str, end: TaskCompleted | TurnAborted) -> TaskOutcome:
    """How a task ended, from the event that ended it."""
    if isinstance(end, TurnAborted):
        if end.model_error is not None:
            return TaskOutcome(
                task_id, conversation, "model_error", None, end.detail, end.model_error
            )
        return TaskOutcome(task_id, conversation, end.reason, detail=end.detail)  # type: ignore[arg-type]
    text = end.last_assistant_message if isinstance(end.last_assistant_message, str) else None
    if end.cut_off is None:
        return TaskOutcome(task_id, conversation, "completed", text)
    status, why = CUT_OFF[end.cut_off]
    return TaskOutcome(task_id, conversation, status, text, f"{why} (finish_reason {end.cut_off})")
