"""Per-conversation metrics: tokens, tool calls, MCP latency, cancellations and
failures, folded from the log, so a past session's figures are as exact as a live one's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from plait.events._types import (
    Event,
    ModelRequestFailed,
    TaskCompleted,
    TaskStarted,
    TokensCounted,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    TurnStarted,
)
from plait.events._values import Usage
from plait.events.projections._base import Projection
from plait.events.projections._tokens import add_usage

__all__ = ["ConversationStats", "SessionStats", "StatsProjection"]


class ConversationStats(msgspec.Struct):
    """What one conversation did."""

    conversation_id: str
    """The conversation."""
    tasks: int = 0
    """Tasks started in it (continuations included)."""
    turns: int = 0
    """Model turns."""
    usage: Usage = Usage()
    """Tokens, summed over its model responses."""
    context_tokens: int = 0
    """The latest request's prompt tokens: how much of the context window it fills."""
    tool_calls: int = 0
    """Tool calls the model made."""
    tool_failures: int = 0
    """Of those, answered ``error``, ``timeout``, ``refused`` or ``unknown``."""
    mcp_calls: int = 0
    """Calls answered by an MCP server (sent, and ended)."""
    mcp_ms_total: float = 0.0
    """Their summed duration, as measured where they ran."""
    mcp_ms_max: float = 0.0
    """The longest of them."""
    cancellations: int = 0
    """Turns ended early by an interrupt, a destroy or a close."""
    failures: int = 0
    """Turns ended by a failure (the model's, or the process crashing)."""
    model_retries: int = 0
    """Failed model request attempts (each retried or the turn failed)."""
    model_errors: int = 0
    """Of the failures, turns the model server failed (``TurnAborted.model_error``)."""
    estimated: int = 0
    """Model responses whose tokens plait counted, the server having sent none (or the
    request being interrupted): ``usage`` is that much an estimate."""
    cut_off: int = 0
    """Tasks whose final reply the server cut off (``truncated`` or ``filtered``)."""

    @property
    def mcp_ms_mean(self) -> float:
        """The mean MCP call duration (0 without calls)."""
        return self.mcp_ms_total / self.mcp_calls if self.mcp_calls else 0.0


class SessionStats(msgspec.Struct):
    """State of ``StatsProjection``: per conversation, in the order they first act."""

    conversations: dict[str, ConversationStats] = {}
    """By conversation id."""
    sent: set[str] = set()
    """Calls recorded as sent to an MCP server (``ToolCallStarted``)."""


class StatsProjection(Projection[SessionStats]):
    """Counts what each conversation did."""

    state_type = SessionStats

    def initial(self) -> SessionStats:
        return SessionStats()

    def handlers(self) -> dict[type[Any], Callable[[SessionStats, Event], None]]:
        return {
            TaskStarted: lambda s, e: _bump(s, e, "tasks"),
            TurnStarted: lambda s, e: _bump(s, e, "turns"),
            ToolCallRequested: lambda s, e: _bump(s, e, "tool_calls"),
            ModelRequestFailed: lambda s, e: _bump(s, e, "model_retries"),
            TokensCounted: self._counted,
            ToolCallStarted: self._started,
            ToolCallCompleted: self._completed,
            TurnAborted: self._aborted,
            TaskCompleted: _task_completed,
        }

    @staticmethod
    def _counted(state: SessionStats, event: Event) -> None:
        body = event.body
        assert isinstance(body, TokensCounted)
        stats = _of(state, event)
        if stats is not None:
            stats.usage = add_usage(stats.usage, body.usage)
            stats.context_tokens = body.usage.prompt_tokens
            stats.estimated += body.estimated

    @staticmethod
    def _started(state: SessionStats, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolCallStarted)
        state.sent.add(body.call_id)

    @staticmethod
    def _completed(state: SessionStats, event: Event) -> None:
        body = event.body
        assert isinstance(body, ToolCallCompleted)
        stats = _of(state, event)
        if stats is None:
            return
        if body.outcome != "ok":
            stats.tool_failures += 1
        if body.call_id in state.sent:
            state.sent.discard(body.call_id)
            stats.mcp_calls += 1
            stats.mcp_ms_total += body.duration_ms
            stats.mcp_ms_max = max(stats.mcp_ms_max, body.duration_ms)

    @staticmethod
    def _aborted(state: SessionStats, event: Event) -> None:
        body = event.body
        assert isinstance(body, TurnAborted)
        if body.reason in ("failed", "crashed"):
            _bump(state, event, "failures")
            if body.model_error is not None:
                _bump(state, event, "model_errors")
        elif body.reason != "replaced":  # a replaced task goes on in its continuation
            _bump(state, event, "cancellations")


def _task_completed(state: SessionStats, event: Event) -> None:
    body = event.body
    assert isinstance(body, TaskCompleted)
    if body.cut_off is not None:
        _bump(state, event, "cut_off")


def _of(state: SessionStats, event: Event) -> ConversationStats | None:
    cid = event.conversation_id
    if cid is None:
        return None
    stats = state.conversations.get(cid)
    if stats is None:
        stats = state.conversations[cid] = ConversationStats(cid)
    return stats


def _bump(state: SessionStats, event: Event, field: str) -> None:
    stats = _of(state, event)
    if stats is not None:
        setattr(stats, field, getattr(stats, field) + 1)
