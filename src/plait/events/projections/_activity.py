"""What a session is about and what it is doing: its title (the first prompt of its root
conversation), the task in flight, the approvals that task awaits, the tasks waiting, and
whether it is closed. ``plait sessions`` shows it (docs/cli.md#reading-a-session).

Folded from the whole log it is exact. Folded from a tail of the log it still says which task
is in flight, once the tail holds a task's start or end (``bounded``), and what that task
awaits; only ``waiting`` needs the whole log (a task queued long ago may wait behind the one
running), and ``title`` the log's head.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from plait.events._types import (
    ContentErased,
    Event,
    SessionClosed,
    SessionReopened,
    SessionStarted,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    TurnAborted,
)
from plait.events._values import InputImage, InputText, TaskPlan, as_text
from plait.events.projections._base import Projection

__all__ = ["Activity", "ActivityProjection", "prompt_text"]


class Activity(msgspec.Struct):
    """State of ``ActivityProjection``."""

    root: str | None = None
    """The root conversation (known once ``SessionStarted`` is folded)."""
    title: str | None = None
    """The first prompt a user gave the root conversation, as text (``None``: none yet)."""
    running: str | None = None
    """The task in flight: started, not yet completed or aborted."""
    bounded: bool = False
    """Whether a task's start or end was folded, so that ``running`` is known."""
    asked: list[str] = []
    """Call ids of the running task that wait for an approval."""
    waiting: list[str] = []
    """Ids of the tasks queued and not yet started or dropped, in the order they came."""
    closed: bool = False
    """Whether the session is closed (and not reopened since)."""


class ActivityProjection(Projection[Activity]):
    """Folds a session's events into its ``Activity``."""

    state_type = Activity

    def initial(self) -> Activity:
        return Activity()

    def handlers(self) -> dict[type[Any], Callable[[Activity, Event], None]]:
        return {
            SessionStarted: _started_session,
            TaskEnqueued: _enqueued,
            TaskStarted: _started,
            TaskCompleted: _ended,
            TurnAborted: _ended,
            TaskDropped: _dropped,
            ToolApprovalRequested: _asked,
            ToolApprovalDecided: _decided,
            SessionClosed: _closed,
            SessionReopened: _reopened,
            ContentErased: _erased,
        }


def prompt_text(plan: TaskPlan) -> str | None:
    """The prompt a user gave ``plan``, as text; ``None`` for a task plait made (a
    continuation, a context change, a compaction)."""
    if plan.closure is not None or plan.context is not None or plan.compact is not None:
        return None
    parts = [
        as_text(item.text) or "" if isinstance(item, InputText) else "[image]"
        for item in plan.input_items
        if isinstance(item, InputText | InputImage)
    ]
    return " ".join(parts) if parts else None


def _started_session(state: Activity, event: Event) -> None:
    assert isinstance(event.body, SessionStarted)
    state.root = event.body.root_conversation_id


def _enqueued(state: Activity, event: Event) -> None:
    assert isinstance(event.body, TaskEnqueued)
    plan = event.body.plan
    state.waiting.append(plan.task_id)
    if state.title is None and state.root is not None and plan.conversation_id == state.root:
        state.title = prompt_text(plan)


def _erased(state: Activity, event: Event) -> None:
    assert isinstance(event.body, ContentErased)
    if state.title is not None and event.body.conversations in ([], [state.root]):
        state.title = "[erased]"  # what the fold read before it was erased


def _started(state: Activity, event: Event) -> None:
    _dropped(state, event)
    state.running, state.asked, state.bounded = event.task_id, [], True


def _ended(state: Activity, event: Event) -> None:
    if state.running in (None, event.task_id):
        state.running, state.asked = None, []
    state.bounded = True


def _dropped(state: Activity, event: Event) -> None:
    if event.task_id in state.waiting:
        state.waiting.remove(event.task_id)


def _asked(state: Activity, event: Event) -> None:
    assert isinstance(event.body, ToolApprovalRequested)
    if event.task_id is not None and event.task_id == state.running:
        state.asked.append(event.body.call_id)


def _decided(state: Activity, event: Event) -> None:
    assert isinstance(event.body, ToolApprovalDecided)
    if event.body.call_id in state.asked:
        state.asked.remove(event.body.call_id)


def _closed(state: Activity, event: Event) -> None:
    state.closed = True


def _reopened(state: Activity, event: Event) -> None:
    state.closed = False
