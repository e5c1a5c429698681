"""The event envelope (``Event``), what is appended (``NewEvent``), the union of every body type,
and the transient notifications; the body types themselves live in ``events/bodies/`` and are
re-exported here, the one place the rest of plait imports them from.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from plait.events._values import RecordedSettings, UtcDateTime
from plait.events.bodies import (
    CANCEL_MESSAGE,
    INTERRUPT_MESSAGE,
    INTERRUPT_TEXT,
    AbortCause,
    ApprovalKeyExpired,
    ApprovalPolicyNarrowed,
    Body,
    CallOutcome,
    ContentErased,
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    ForkOrigin,
    HeadSigned,
    HistoryCompacted,
    InterruptCause,
    McpAllowlistNormalized,
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolsRefreshed,
    McpToolWithheld,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    PlanStatus,
    PlanStep,
    PlanUpdated,
    RerunOrigin,
    SessionClosed,
    SessionReopened,
    SessionResumed,
    SessionStarted,
    StopRequested,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    TokensCounted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    TurnStarted,
)

__all__ = [
    "CANCEL_MESSAGE",
    "INTERRUPT_MESSAGE",
    "INTERRUPT_TEXT",
    "AbortCause",
    "AgentMessageDelta",
    "AnyBody",
    "ApprovalKeyExpired",
    "ApprovalPolicyNarrowed",
    "Body",
    "CallOutcome",
    "ContentErased",
    "ConversationContextChanged",
    "ConversationDestroyed",
    "ConversationOpened",
    "Event",
    "FeedLagged",
    "ForkOrigin",
    "HeadSigned",
    "HistoryCompacted",
    "InterruptCause",
    "McpAllowlistNormalized",
    "McpServerFailed",
    "McpServerReady",
    "McpServersOffered",
    "McpToolWithheld",
    "McpToolsRefreshed",
    "ModelRequestFailed",
    "ModelRequested",
    "ModelResponded",
    "NewEvent",
    "PlanStatus",
    "PlanStep",
    "PlanUpdated",
    "ReasoningDelta",
    "RerunOrigin",
    "SessionClosed",
    "SessionReopened",
    "SessionResumed",
    "SessionStarted",
    "StopRequested",
    "TaskCompleted",
    "TaskDropped",
    "TaskEnqueued",
    "TaskStarted",
    "TokensCounted",
    "ToolApprovalDecided",
    "ToolApprovalRequested",
    "ToolCallCompleted",
    "ToolCallRequested",
    "ToolCallStarted",
    "Transient",
    "TurnAborted",
    "TurnStarted",
    "recorded_settings",
]


AnyBody = (
    SessionStarted
    | SessionClosed
    | SessionReopened
    | SessionResumed
    | ConversationOpened
    | ConversationContextChanged
    | ConversationDestroyed
    | TaskEnqueued
    | TaskStarted
    | TaskCompleted
    | TaskDropped
    | TurnStarted
    | TurnAborted
    | StopRequested
    | ModelRequested
    | ModelRequestFailed
    | ModelResponded
    | TokensCounted
    | ToolCallRequested
    | ToolApprovalRequested
    | ToolApprovalDecided
    | ApprovalKeyExpired
    | ApprovalPolicyNarrowed
    | ToolCallStarted
    | ToolCallCompleted
    | HistoryCompacted
    | McpServerReady
    | McpServerFailed
    | McpToolsRefreshed
    | McpToolWithheld
    | McpServersOffered
    | McpAllowlistNormalized
    | PlanUpdated
    | HeadSigned
    | ContentErased
)
"""Every persisted body type."""


class Event(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One stored event: where it sits in its stream, when, and what happened. It is stored
    as the msgpack array of its fields, in order (docs/event-log.md#encoding), and exported as
    a JSON object."""

    stream: str
    """The session id."""
    seq: int
    """Dense, from 1, per stream."""
    at: UtcDateTime
    """When it was recorded (UTC); recorded, never re-read from the clock."""
    v: int
    """Schema version of ``body``."""
    body: AnyBody
    """What happened."""
    prev_hash: bytes
    """``hash`` of the event before it in the stream (32 zero bytes for seq 1)."""
    conversation_id: str | None = None
    """The conversation it belongs to, if any."""
    task_id: str | None = None
    """The task it belongs to, if any."""
    position: int = 0
    """Global position across streams, assigned by the store; not part of the hashed bytes."""
    hash: bytes = b""
    """sha-256 of the stored bytes; filled in on read, not part of them."""


class NewEvent(msgspec.Struct, frozen=True):
    """A body to append, with its routing ids and (optionally) its recorded time."""

    body: Body
    """What happened."""
    conversation_id: str | None = None
    """The conversation it belongs to."""
    task_id: str | None = None
    """The task it belongs to."""
    at: UtcDateTime | None = None
    """When it happened; ``None`` lets the store's clock stamp it at append."""
    scoped_blobs: bool = False
    """Store every content string as a blob of this event alone, whatever its size: content
    that must be deletable on its own (a ``ttl`` conversation's)."""
    session_blobs: bool = False
    """Store every content string as a blob of this session alone, whatever its size: content
    that ``forget`` may erase (docs/storage.md#erasure). The same text twice in a session
    is stored once."""

    def unstored(self, stream: str, seq: int, at: datetime) -> Event:
        """This event as the actors fold it when the log does not keep it (a storage policy
        dropped it, or a replay stopped storing at a crash point): placed after ``seq``'s
        event, with no hash."""
        body = self.body
        return Event(
            stream,
            seq,
            self.at or at,
            body.VERSION,
            body,  # type: ignore[arg-type]
            b"",
            self.conversation_id,
            self.task_id,
        )


def recorded_settings(events: Sequence[Event]) -> RecordedSettings | None:
    """How the runtime that started the session of ``events`` was configured, as its
    ``SessionStarted`` keeps it; ``None`` for a log that is no session's or predates it."""
    started = events[0].body if events else None
    return started.settings if isinstance(started, SessionStarted) else None


# --- transient notifications (never persisted) -----------------------------------------------


class Transient(msgspec.Struct, frozen=True, tag=True, tag_field="type"):
    """Base of notifications that go to subscribers only; stores refuse them."""


class AgentMessageDelta(Transient, frozen=True):
    """A piece of assistant text as it streams."""

    conversation_id: str
    """Where it streams."""
    task_id: str
    """The task streaming."""
    text: str
    """The new text."""


class ReasoningDelta(Transient, frozen=True):
    """A piece of reasoning text as it streams."""

    conversation_id: str
    """Where it streams."""
    task_id: str
    """The task streaming."""
    text: str
    """The new text."""


class FeedLagged(Transient, frozen=True):
    """A live feed's reader fell behind by its limit: what was recorded meanwhile is not in
    the feed, but in the log after ``after_seq`` (``Feed.catch_up`` reads it). Deltas
    streamed meanwhile are gone; the events that end their replies have the text."""

    session_id: str
    """The session whose feed lagged."""
    after_seq: int
    """The seq of the last event the feed handed out whole: re-read the log from after it."""
