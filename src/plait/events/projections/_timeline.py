"""The rollout timeline: what a UI needs to re-render a session, in order."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from plait.events._types import (
    ApprovalKeyExpired,
    ApprovalPolicyNarrowed,
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    HistoryCompacted,
    McpServerFailed,
    McpServerReady,
    ModelRequestFailed,
    ModelResponded,
    SessionClosed,
    SessionReopened,
    SessionResumed,
    SessionStarted,
    StopRequested,
    TaskCompleted,
    TaskDropped,
    TaskStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
)
from plait.events._values import Content, Redacted
from plait.events.projections._base import Projection

__all__ = ["Timeline", "TimelineEntry", "TimelineProjection"]


class TimelineEntry(msgspec.Struct, frozen=True):
    """One thing a person would see happen."""

    stream: str
    """The session."""
    seq: int
    """The event behind it."""
    at: datetime
    """When it happened."""
    kind: str
    """``assistant``, ``tool_call``, ``tool_result``, ``task_started``, ``aborted``..."""
    text: str
    """A one-line rendering."""
    conversation_id: str | None = None
    """Where it happened (a UI routes by this, docs/conv-tools.md#event-order)."""
    task_id: str | None = None
    """Which task."""


class Timeline(msgspec.Struct):
    """State of ``TimelineProjection``."""

    entries: list[TimelineEntry] = []
    """In log order."""


def _show(content: Content | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Redacted):
        return content.text
    return f"[blob: {content.size} bytes]"


def _render(body: Any) -> tuple[str, str] | None:
    match body:
        case SessionStarted(root_conversation_id=root):
            return "session_started", f"session started (root conversation {root})"
        case SessionClosed(reason=reason):
            return "session_closed", f"session closed {reason}".rstrip()
        case SessionReopened(closed_seq=closed):
            return "session_reopened", f"session reopened (closed at seq {closed})"
        case SessionResumed(crashed_task_id=crashed, pending=pending):
            cut = f", task {crashed} was cut off" if crashed else ""
            return "session_resumed", f"session taken over{cut}, {pending} waiting"
        case ConversationOpened(parent_id=parent):
            return "conversation_opened", f"conversation opened (parent {parent})"
        case ConversationContextChanged(changed=changed, clear_history=clear):
            cleared = ", history cleared" if clear else ""
            return "context_changed", f"context changed: {', '.join(changed)}{cleared}"
        case ConversationDestroyed(reason=reason):
            return "conversation_destroyed", f"conversation destroyed {reason}".rstrip()
        case TaskStarted():
            return "task_started", "task started"
        case TaskCompleted(last_assistant_message=last):
            return "task_completed", f"task completed: {_show(last)}"
        case TaskDropped(reason=reason):
            return "task_dropped", f"task dropped: {reason}"
        case TurnAborted(reason=reason, cause=cause, detail=detail):
            return "aborted", f"turn aborted ({reason}: {cause}) {detail}".rstrip()
        case StopRequested(detail=detail):
            return "stop_requested", f"stop requested, at the next checkpoint: {detail}"
        case ModelRequestFailed(attempt=attempt, error=error):
            return "model_failed", f"model request attempt {attempt} failed: {error}"
        case ModelResponded(text=text, tool_calls=calls):
            names = ", ".join(call.name for call in calls)
            return "assistant", _show(text) + (f" [calls: {names}]" if names else "")
        case ToolCallRequested(tool=tool, arguments=args):
            return "tool_call", f"{tool}({_show(args)})"
        case ToolApprovalRequested(tool=tool, reason=reason):
            return "approval_requested", f"approval requested for {tool} {reason}".rstrip()
        case ToolApprovalDecided(approved=approved, decided_by=who):
            return "approval_decided", f"{'approved' if approved else 'denied'} by {who}"
        case ApprovalKeyExpired(key=key):
            return "approval_expired", f"remembered approval of {key.tool} lapsed"
        case ApprovalPolicyNarrowed(requested=requested, effective=effective):
            return "policy_narrowed", f"approval policy {requested} narrowed to {effective}"
        case ToolCallCompleted(outcome=outcome, output=output):
            return "tool_result", f"{outcome}: {_show(output)}"
        case HistoryCompacted(tokens_before=before, tokens_after=after):
            return "compacted", f"history compacted ({before} -> {after} tokens)"
        case McpServerReady(server=server, tools=tools):
            return "mcp_ready", f"MCP server {server} ready ({len(tools)} tools)"
        case McpServerFailed(server=server, reason=reason):
            return "mcp_failed", f"MCP server {server} failed: {reason}"
    return None


class TimelineProjection(Projection[Timeline]):
    """Folds events into timeline entries; bookkeeping events are left out."""

    state_type = Timeline

    def initial(self) -> Timeline:
        return Timeline()

    def handlers(self) -> dict[type[Any], Callable[[Timeline, Event], None]]:
        shown = (
            SessionStarted, SessionClosed, SessionReopened, ConversationOpened,
            ConversationContextChanged,
            ConversationDestroyed, TaskStarted, TaskCompleted, TaskDropped, TurnAborted,
            StopRequested, ModelRequestFailed, ModelResponded, ToolCallRequested,
            ToolApprovalRequested, ToolApprovalDecided, ApprovalKeyExpired, ApprovalPolicyNarrowed,
            ToolCallCompleted, HistoryCompacted, McpServerReady, McpServerFailed,
        )  # fmt: skip
        return dict.fromkeys(shown, self._entry)

    @staticmethod
    def _entry(state: Timeline, event: Event) -> None:
        rendered = _render(event.body)
        if rendered is not None:
            kind, text = rendered
            state.entries.append(
                TimelineEntry(
                    event.stream,
                    event.seq,
                    event.at,
                    kind,
                    text,
                    event.conversation_id,
                    event.task_id,
                )
            )
