"""What happens to a session and its conversations: started, resumed, closed; opened,
changed, compacted, destroyed (docs/conversations.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from plait.events._values import (
    ApprovalPolicy,
    Content,
    RecordedSettings,
    StoragePolicy,
    ToolPrefs,
)
from plait.events.bodies._base import Body

__all__ = [
    "ConversationContextChanged",
    "ConversationDestroyed",
    "ConversationOpened",
    "ForkOrigin",
    "HistoryCompacted",
    "RerunOrigin",
    "SessionClosed",
    "SessionReopened",
    "SessionResumed",
    "SessionStarted",
]


# --- session ---------------------------------------------------------------------------------


class RerunOrigin(msgspec.Struct, frozen=True, gc=False):
    """What a live rerun ran its source's tasks against."""

    model: str
    """The model asked for."""
    base_url: str = ""
    """The server it was sent to (empty: the SDK's default)."""
    live_tools: bool = False
    """Calls the source never made ran for real (else they were answered "not recorded")."""


class ForkOrigin(msgspec.Struct, frozen=True, gc=False):
    """Where a forked session came from."""

    stream: str
    """The source session."""
    at_seq: int
    """The last source event copied."""
    full_recovery: bool = False
    """Resumed, the fork records ``SessionResumed`` and answers the hand-offs its cut left
    open, as sessions recording ``RecordedSettings.resume_markers`` and ``handoff_answers``
    do, whatever its source recorded (docs/replay.md#hand-offs-a-fork-cut). Forks made
    before it was recorded lack it: they resume and replay as they did."""
    rerun: RerunOrigin | None = None
    """Set when the fork is a live rerun of its source: what it was run against
    (docs/replay.md#live-reruns)."""


class SessionStarted(Body, frozen=True):
    """A session's stream begins; its root conversation follows."""

    root_conversation_id: str
    """The root conversation, which cannot be destroyed."""
    model: str = ""
    """The model the session was configured with."""
    forked_from: ForkOrigin | None = None
    """Set when the session is a fork."""
    settings: RecordedSettings | None = None
    """How the runtime that started it was configured (``None`` in logs before it was kept)."""
    approval_policy: ApprovalPolicy = "never"
    """When its MCP tool calls wait for a decision; its conversations may only narrow it."""


class SessionClosed(Body, frozen=True):
    """The session was closed; nothing runs in it until it is resumed."""

    reason: str = ""
    """Why, for people."""


class SessionReopened(Body, frozen=True):
    """A closed session was resumed (``Runtime.resume``): it takes work again from here."""

    closed_seq: int
    """The seq of the ``SessionClosed`` it reopens."""


class SessionResumed(Body, frozen=True):
    """A process picked up a session another left with work in flight (a crash, a ``kill -9``).

    Recorded first, in the same group as what the recovery records next: where a replay
    finds it, the recorded process stopped and a new one took over.
    """

    crashed_task_id: str | None = None
    """The task the stopped process was running, which the recovery now ends (``crash``)."""
    pending: int = 0
    """Tasks that were waiting to run, which run now in order."""


# --- conversations ---------------------------------------------------------------------------


class ConversationOpened(Body, frozen=True):
    """A conversation exists, with its full context (docs/conversations.md#conversation-context)."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("base_instructions", "user_instructions")
    parent_id: str | None = None
    """The conversation that created it; ``None`` for the root."""
    base_instructions: Content | None = None
    """System instructions; ``None`` means the built-in default."""
    user_instructions: Content | None = None
    """Standing user instructions, recorded as the first history message."""
    mcp_allowlist: list[str] | None = None
    """Fully-qualified tool names it may see; ``None`` means every tool of the session."""
    tool_prefs: ToolPrefs = ToolPrefs()
    """Built-in tool switches."""
    storage_policy: StoragePolicy = StoragePolicy()
    """What of its content is persisted."""
    approval_policy: ApprovalPolicy | None = None
    """Its own approval policy; ``None``: the session's. The stricter of the two holds."""


class ConversationContextChanged(Body, frozen=True):
    """A live conversation's context changed; it applies from the next turn."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("base_instructions", "user_instructions")
    changed: list[str]
    """Names of the fields below that carry new values."""
    base_instructions: Content | None = None
    """New base instructions, if named in ``changed``."""
    user_instructions: Content | None = None
    """New user instructions, if named in ``changed``."""
    mcp_allowlist: list[str] | None = None
    """New allowlist, if named in ``changed``."""
    tool_prefs: ToolPrefs | None = None
    """New tool switches, if named in ``changed``."""
    clear_history: bool = False
    """Start the history afresh with a rebuild message."""
    approval_policy: ApprovalPolicy | None = None
    """New approval policy, if named in ``changed``."""

    def applied(self, context: ConversationOpened) -> ConversationOpened:
        """``context`` with this change made: the fields named in ``changed`` replaced."""
        changes = {name: getattr(self, name) for name in self.changed}
        return msgspec.structs.replace(context, **changes)


class ConversationDestroyed(Body, frozen=True):
    """A conversation was destroyed (``conv.destroy``); its history stays in the log."""

    reason: str = ""
    """Why, for people."""


# --- history ---------------------------------------------------------------------------------


class HistoryCompacted(Body, frozen=True):
    """Older history was replaced by a summary; the latest messages were kept."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("summary",)
    summary: Content
    """The summary that stands for what was dropped."""
    kept_from: int
    """Index in the history before compaction of the first message kept (moved back, if need
    be, so that no tool call is parted from its answers)."""
    tokens_before: int = 0
    """Approximate prompt tokens before."""
    tokens_after: int = 0
    """Approximate prompt tokens after."""
    trigger: Literal["auto", "manual", "bound"] = "manual"
    """``auto``: the prompt neared the context window; ``manual``: asked for; ``bound``: the
    history passed ``max_items``/``max_tokens`` and its oldest messages were removed (the
    summary then only says so)."""
