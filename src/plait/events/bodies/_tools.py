"""What happens to tool calls and MCP servers: requested, approved or denied, started,
completed; servers ready, failed, refreshed (docs/tools.md, docs/approvals.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from plait.events._values import (
    ApprovalPolicy,
    CommandKey,
    Content,
    ContextChange,
    InputImage,
    McpToolSnapshot,
    UtcDateTime,
)
from plait.events.bodies._base import Body
from plait.events.bodies._tasks import AbortCause

__all__ = [
    "ApprovalKeyExpired",
    "ApprovalPolicyNarrowed",
    "CallOutcome",
    "McpAllowlistNormalized",
    "McpServerFailed",
    "McpServerReady",
    "McpServersOffered",
    "McpToolWithheld",
    "McpToolsRefreshed",
    "ToolApprovalDecided",
    "ToolApprovalRequested",
    "ToolCallCompleted",
    "ToolCallRequested",
    "ToolCallStarted",
]


# --- tools -----------------------------------------------------------------------------------

CallOutcome = Literal["ok", "error", "timeout", "refused", "unknown"]
"""How a tool call ended, as ``ToolCallCompleted.outcome`` records it."""


class ToolCallRequested(Body, frozen=True):
    """A tool call is about to run (or be refused); recorded before anything runs it."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("arguments",)
    call_id: str
    """The model's call id."""
    tool: str
    """Fully-qualified tool name."""
    arguments: Content = "{}"
    """Arguments as a JSON string."""
    read_only: bool = False
    """Whether the tool declares it changes nothing (safe to run in parallel and to re-run)."""


class ToolApprovalRequested(Body, frozen=True):
    """A tool call needs a decision before it runs."""

    call_id: str
    """The call waiting."""
    tool: str
    """Fully-qualified tool name."""
    reason: str = ""
    """Why approval is needed."""


class ToolApprovalDecided(Body, frozen=True):
    """A tool call was approved or denied."""

    call_id: str
    """The call decided."""
    approved: bool
    """The decision."""
    decided_by: str
    """Who or what decided: ``approver`` (or the name the approver gave, ``user`` at the
    terminal), ``key`` (a remembered approval), ``policy`` (no approver to ask), ``timeout``,
    ``error`` (the approver failed), ``recovery`` (a crash or a forced close cut the wait)."""
    scope: Literal["once", "conversation", "session"] = "once"
    """How far the approval reaches."""
    expires_at: UtcDateTime | None = None
    """When a remembered approval lapses."""
    key: CommandKey | None = None
    """The approval remembered (scope ``conversation`` or ``session``), or the one that
    approved this call (``decided_by="key"``)."""
    reason: str = ""
    """Why, for people (the approver's words, or what failed)."""


class ApprovalKeyExpired(Body, frozen=True):
    """A remembered approval lapsed (its ``expires_at`` passed, by recorded time) and was
    dropped: calls it matched ask again."""

    key: CommandKey
    """The key dropped."""


class ApprovalPolicyNarrowed(Body, frozen=True):
    """A conversation asked for an approval policy wider than its session's; the session's
    holds (a conversation may only narrow it, docs/approvals.md#where-the-policy-comes-from)."""

    requested: ApprovalPolicy
    """The policy asked for."""
    effective: ApprovalPolicy
    """The policy that holds: the session's."""


class ToolCallStarted(Body, frozen=True):
    """An MCP tool call was sent to its server, once a slot under the limits was free.

    Recorded before the server sees the call: a call requested but never started can be
    re-run safely after a crash, whatever the tool does.
    """

    call_id: str
    """The call sent."""
    server: str
    """The configured MCP server it went to."""


class ToolCallCompleted(Body, frozen=True):
    """A tool call ended; its output goes back to the model."""

    VERSION: ClassVar[int] = 2  # v1 had no aborted_by: see events/_upcasters.py
    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("output", "images", "control")
    call_id: str
    """The call answered."""
    output: Content
    """What the model is shown."""
    outcome: CallOutcome = "ok"
    """How it ended; ``unknown`` when a crash hid the result."""
    duration_ms: float = 0.0
    """Wall time of the call, milliseconds."""
    images: list[InputImage] = []
    """Images the tool returned (MCP image content), kept as attachments."""
    control: ContextChange | None = None
    """A change of the calling conversation's context the tool asked for (its result's
    ``_meta["plait/context"]``, docs/conversations.md#context-changes): recorded as
    ``ConversationContextChanged`` once the turn's calls are answered, before the next turn."""
    aborted_by: AbortCause | None = None
    """Set when no tool answered: the call was cut off, and plait answered it for this cause
    (``crash`` and ``forced_close`` answers say what is known of the call)."""

    @property
    def is_error(self) -> bool:
        """Whether the model is told the call failed."""
        return self.outcome != "ok"


# --- MCP -------------------------------------------------------------------------------------


class McpServerReady(Body, frozen=True):
    """An MCP server answered ``initialize`` and listed its tools."""

    server: str
    """The configured server name."""
    tools: list[McpToolSnapshot] = []
    """Its tools, in name order."""
    attempt: int = 1
    """Which start attempt this is; more than 1 means the server was restarted."""


class McpServerFailed(Body, frozen=True):
    """An MCP server could not start or died."""

    server: str
    """The configured server name."""
    reason: str
    """What happened, for people (command not found, stderr tail, timeout)."""
    attempt: int = 1
    """Which start attempt failed (or, for a server that died, which one it was running)."""
    retry_in_sec: float | None = None
    """Backoff before it is started again; ``None`` when it will not be."""


class McpToolsRefreshed(Body, frozen=True):
    """A ready MCP server said its tools changed (``tools/list_changed``) and was re-listed."""

    server: str
    """The configured server name."""
    tools: list[McpToolSnapshot] = []
    """Its tools now, in name order."""


class McpServersOffered(Body, frozen=True):
    """A run of the session (a start, a resume, a takeover, a wake) offers these MCP servers,
    which differ from those the log last said (docs/replay.md#mcp-servers-per-run)."""

    servers: list[str] = []
    """The enabled configured servers' names, sorted; their tools are the ones offered."""


class McpToolWithheld(Body, frozen=True):
    """Servers offer one fully-qualified tool name with different schemas: nobody gets it."""

    name: str
    """The fully-qualified name in conflict."""
    servers: list[str]
    """The servers offering it, in name order."""
    schema_sha256s: list[str] = []
    """Each server's schema hash, in the order of ``servers``."""


class McpAllowlistNormalized(Body, frozen=True):
    """A conversation's allowlist used the deprecated ``server/tool`` form and was rewritten."""

    entries: list[str]
    """The deprecated entries, as given."""
    names: list[str]
    """What each became, in the order of ``entries``."""
