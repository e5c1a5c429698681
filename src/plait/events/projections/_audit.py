"""Tool-call audit rows: who called what, with which arguments, who approved, how it ended."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from plait.events._types import (
    Event,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
)
from plait.events._values import Content
from plait.events.projections._base import Projection

__all__ = ["AuditLog", "AuditProjection", "AuditRow"]


class AuditRow(msgspec.Struct):
    """One tool call from request to outcome."""

    stream: str
    """The session."""
    seq: int
    """Seq of the ``ToolCallRequested`` event."""
    conversation_id: str | None
    """The calling conversation."""
    task_id: str | None
    """The calling task."""
    call_id: str
    """The model's call id."""
    tool: str
    """Fully-qualified tool name."""
    arguments: Content
    """Arguments as a JSON string (or ``Redacted``)."""
    read_only: bool
    """Whether the tool declared itself read-only."""
    requested_at: datetime
    """When the call was requested."""
    approval: str = "not required"
    """``not required``, ``pending``, ``approved`` or ``denied``."""
    decided_by: str | None = None
    """Who or what decided the approval."""
    outcome: str = "pending"
    """``pending`` until it ends; then ``ok``, ``error``, ``timeout``, ``refused``, ``unknown``
    (it was sent to its server and then cut off, by a crash or an abort: it may have acted),
    ``cancelled`` (an interrupt before it was sent) or ``aborted`` (its turn ended before it
    was sent)."""
    output_size: int | None = None
    """Size of the output in bytes."""
    duration_ms: float | None = None
    """Wall time of the call."""
    completed_at: datetime | None = None
    """When the outcome was recorded."""
    server: str | None = None
    """The MCP server the call was sent to (``None``: a built-in, or never sent)."""
    started_at: datetime | None = None
    """When it was sent to its server (after waiting for a free slot)."""


class AuditLog(msgspec.Struct):
    """State of ``AuditProjection``."""

    rows: list[AuditRow] = []
    """In request order."""
    index: dict[str, int] = {}
    """``stream/call_id`` → row number."""


def _key(event: Event, call_id: str) -> str:
    return f"{event.stream}/{call_id}"


class AuditProjection(Projection[AuditLog]):
    """Folds tool events into audit rows."""

    state_type = AuditLog

    def initial(self) -> AuditLog:
        return AuditLog()

    def handlers(self) -> dict[type[Any], Callable[[AuditLog, Event], None]]:
        return {
            ToolCallRequested: self._requested,
            ToolApprovalRequested: self._approval_requested,
            ToolApprovalDecided: self._decided,
            ToolCallStarted: self._started,
            ToolCallCompleted: self._completed,
            TurnAborted: self._aborted,
        }

    @staticmethod
    def _requested(state: AuditLog, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolCallRequested)
        state.index[_key(event, body.call_id)] = len(state.rows)
        state.rows.append(
            AuditRow(
                stream=event.stream,
                seq=event.seq,
                conversation_id=event.conversation_id,
                task_id=event.task_id,
                call_id=body.call_id,
                tool=body.tool,
                arguments=body.arguments,
                read_only=body.read_only,
                requested_at=event.at,
            )
        )

    @staticmethod
    def _row(state: AuditLog, event: Event, call_id: str) -> AuditRow | None:
        number = state.index.get(_key(event, call_id))
        return None if number is None else state.rows[number]

    def _approval_requested(self, state: AuditLog, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolApprovalRequested)
        row = self._row(state, event, body.call_id)
        if row is not None:
            row.approval = "pending"

    def _decided(self, state: AuditLog, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolApprovalDecided)
        row = self._row(state, event, body.call_id)
        if row is not None:
            row.approval = "approved" if body.approved else "denied"
            row.decided_by = body.decided_by

    def _started(self, state: AuditLog, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolCallStarted)
        row = self._row(state, event, body.call_id)
        if row is not None:
            row.server = body.server
            row.started_at = event.at

    @staticmethod
    def _aborted(state: AuditLog, event: Event) -> None:
        """The calls of the aborted turn that no continuation answers end ``unknown`` if
        they were sent to their server (``ToolCallStarted``: the tool may have acted, its
        result was not seen), else ``cancelled`` (an interrupt) or ``aborted`` (the task
        replaced, failed or crashed): docs/replay.md#audit."""
        body = event.body
        assert isinstance(body, TurnAborted)
        awaiting = set(body.awaiting_call_ids)
        outcome = "cancelled" if body.reason == "interrupted" else "aborted"
        for row in reversed(state.rows):
            if row.stream != event.stream:
                continue
            if row.task_id != event.task_id:
                break
            if row.outcome == "pending" and row.call_id not in awaiting:
                row.outcome = "unknown" if row.started_at is not None else outcome
                row.completed_at = event.at

    def _completed(self, state: AuditLog, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolCallCompleted)
        row = self._row(state, event, body.call_id)
        if row is None:
            return
        row.outcome = body.outcome
        output = body.output
        row.output_size = len(output.encode()) if isinstance(output, str) else output.size
        row.duration_ms = body.duration_ms
        row.completed_at = event.at
