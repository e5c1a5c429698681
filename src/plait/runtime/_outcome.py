"""How a task ended: ``TaskOutcome``, and following a task through its continuations."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from plait._errors import ModelErrorKind, PlaitError
from plait.actors import Feed, Kinds
from plait.events import (
    Event,
    FeedLagged,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    Transient,
    TurnAborted,
)

__all__ = [
    "FOLLOWED",
    "Follower",
    "Status",
    "TaskOutcome",
    "await_outcome",
    "await_outcome_async",
    "outcome",
]

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


FOLLOWED = Kinds(
    held=(TaskEnqueued, TaskCompleted, TurnAborted, TaskDropped),
    waking=(TaskCompleted, TurnAborted, TaskDropped),
)
"""What a ``Follower`` reads of a feed, and what of it ends or replaces a task."""


class Follower:
    """Follows a task through the continuations it chains, event by event, to how it ended."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.conversation = ""
        self._watched = {task_id}
        self._awaited: set[str] = set()

    def see(self, item: Event | Transient) -> TaskOutcome | None:
        """Take the feed's next item; return the outcome once the chain has ended."""
        if not isinstance(item, Event) or item.task_id is None:
            return None
        body = item.body
        if isinstance(body, TaskEnqueued) and body.plan.closure is not None:
            if body.plan.closure.call_id in self._awaited:
                self._watched.add(body.plan.task_id)
            return None
        if item.task_id not in self._watched:
            return None
        self.conversation = item.conversation_id or self.conversation
        if isinstance(body, TaskCompleted | TurnAborted):
            if isinstance(body, TurnAborted) and body.reason == "replaced":
                self._awaited.update(body.awaiting_call_ids)
                return None
            return outcome(self.task_id, self.conversation, body)
        if isinstance(body, TaskDropped):
            return TaskOutcome(self.task_id, self.conversation, "dropped", detail=body.reason)
        return None

    def timed_out(self, timeout: float | None, raise_timeout: bool) -> TaskOutcome:
        """What waiting ``timeout`` seconds in vain gives: an error, or ``interrupted``."""
        if raise_timeout:
            raise PlaitError(f"task {self.task_id} did not end within {timeout} s (it goes on)")
        return TaskOutcome(self.task_id, self.conversation, "interrupted", detail="timed out")


def await_outcome(
    feed: Feed,
    task_id: str,
    timeout: float | None,
    raise_timeout: bool = True,
    on_item: Callable[[Event | Transient], object] | None = None,
) -> TaskOutcome:
    """Follow ``task_id`` through the continuations it chains until the chain ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    follower = Follower(task_id)
    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
        item = feed.get(timeout=remaining)
        if item is None:
            return follower.timed_out(timeout, raise_timeout)
        items = feed.catch_up(item) if isinstance(item, FeedLagged) else [item]
        for each in items:
            if on_item is not None:
                on_item(each)
            if (ended := follower.see(each)) is not None:
                return ended


async def await_outcome_async(
    feed: Feed, task_id: str, timeout: float | None, raise_timeout: bool = True
) -> TaskOutcome:
    """``await_outcome`` for asyncio code: waits on the loop, holding no thread."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    follower = Follower(task_id)
    while True:
        remaining = None if deadline is None else max(deadline - loop.time(), 0)
        item = await feed.aget(timeout=remaining)
        if item is None:
            return follower.timed_out(timeout, raise_timeout)
        if isinstance(item, FeedLagged):  # reads the log: off the loop
            items: list[Event | Transient] = [*await asyncio.to_thread(feed.catch_up, item)]
        else:
            items = [item]
        for each in items:
            if (ended := follower.see(each)) is not None:
                return ended


CUT_OFF: dict[str, tuple[Status, str]] = {
    "length": (
        "truncated",
        "the reply was cut off at a length limit (the output cap, a [model] reply limit, "
        "or the context's end)",
    ),
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
