"""The event envelope and every body type: each a frozen, tagged, past-tense ``msgspec.Struct``.

Schema rule: a new field gets a default and goes last; any other change bumps the body's
``VERSION`` and registers an upcaster from the old version (see ``codec.Upcasters``).
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

import msgspec

from plait.errors import ModelErrorKind
from plait.events.values import (
    ApprovalPolicy,
    CommandKey,
    Content,
    ContextChange,
    InputImage,
    McpToolSnapshot,
    RuntimeSettings,
    StoragePolicy,
    TaskPlan,
    ToolCall,
    ToolPrefs,
    Usage,
    UtcDateTime,
)

__all__ = [
    "CANCEL_MESSAGE",
    "INTERRUPT_CAUSES",
    "INTERRUPT_MESSAGE",
    "INTERRUPT_TEXT",
    "AbortCause",
    "AgentMessageDelta",
    "AnyBody",
    "ApprovalKeyExpired",
    "ApprovalPolicyNarrowed",
    "Body",
    "CallOutcome",
    "ConversationContextChanged",
    "ConversationDestroyed",
    "ConversationOpened",
    "Event",
    "ForkOrigin",
    "HistoryCompacted",
    "McpAllowlistNormalized",
    "McpServerFailed",
    "McpServerReady",
    "McpToolWithheld",
    "McpToolsRefreshed",
    "ModelRequestFailed",
    "ModelRequested",
    "ModelResponded",
    "NewEvent",
    "ReasoningDelta",
    "SessionClosed",
    "SessionResumed",
    "SessionStarted",
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
]


class Body(msgspec.Struct, frozen=True, tag=True, tag_field="type", omit_defaults=True, gc=False):
    """Base of persisted event bodies; the tag is the class name."""

    VERSION: ClassVar[int] = 1
    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ()


# --- session ---------------------------------------------------------------------------------


class ForkOrigin(msgspec.Struct, frozen=True, gc=False):
    """Where a forked session came from."""

    stream: str
    """The source session."""
    at_seq: int
    """The last source event copied."""


class SessionStarted(Body, frozen=True):
    """A session's stream begins; its root conversation follows."""

    root_conversation_id: str
    """The root conversation, which cannot be destroyed."""
    model: str = ""
    """The model the session was configured with."""
    forked_from: ForkOrigin | None = None
    """Set when the session is a fork."""
    settings: RuntimeSettings | None = None
    """How the runtime that started it was configured (``None`` in logs before it was kept)."""
    approval_policy: ApprovalPolicy = "never"
    """When its MCP tool calls wait for a decision; its conversations may only narrow it."""


class SessionClosed(Body, frozen=True):
    """The session was closed; nothing runs in it until it is resumed."""

    reason: str = ""
    """Why, for people."""


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


# --- tasks and turns -------------------------------------------------------------------------

AbortCause = Literal[
    "user", "close", "forced_close", "destroy", "replaced", "crash", "model", "error"
]
"""What ended a task early, or cut off a call (docs/interrupts.md#causes): ``user`` (an
interrupt by the embedder), ``close`` (the session's close interrupted it), ``forced_close``
(it did not stop within the close's timeout), ``destroy`` (its conversation was destroyed),
``replaced`` (an interrupting tool handed the timeline to another task), ``crash`` (the process
stopped), ``model`` (the model server failed), ``error`` (plait refused or failed to go on)."""
INTERRUPT_CAUSES: tuple[AbortCause, ...] = ("user", "close")
"""Causes that interrupt the running task and drop the chain it started."""


class TaskEnqueued(Body, frozen=True):
    """A task was planned (docs/conversations.md#taskplan)."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("plan",)
    plan: TaskPlan
    """The whole plan."""
    front: bool = False
    """Queued ahead of waiting tasks (an interrupting tool's plans run next)."""


class TaskStarted(Body, frozen=True):
    """The scheduler started the task named in the envelope; its input joins the history."""


class TaskCompleted(Body, frozen=True):
    """The task ran to its end."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("last_assistant_message",)
    last_assistant_message: Content | None = None
    """The final assistant text, handed to a continuation as the tool's return value."""
    cut_off: Literal["length", "content_filter"] | None = None
    """Why the final reply is not whole, when it is not: the server stopped it at the output
    cap or the context's end (``length``), or its content filter stopped it. The task is then
    ``truncated`` or ``filtered``, not ``completed``; the text it had is kept."""


class TaskDropped(Body, frozen=True):
    """A planned task will never run (its conversation was destroyed, an interrupt dropped
    the chain it was part of)."""

    VERSION: ClassVar[int] = 2  # v1 had no cause: see events/upcasters.py
    reason: str
    """Why, for people."""
    cause: AbortCause
    """What dropped it."""


class TurnStarted(Body, frozen=True):
    """A turn of the running task began."""

    turn: int
    """1-based turn number within the task."""


class TurnAborted(Body, frozen=True):
    """The running turn ended early; unanswered tool calls get a synthetic output."""

    VERSION: ClassVar[int] = 2  # v1 had no cause: see events/upcasters.py
    reason: Literal["interrupted", "replaced", "crashed", "failed"]
    """How the task ended, as its outcome says it (``interrupted``, ``failed``...)."""
    cause: AbortCause
    """What ended it."""
    detail: str = ""
    """What happened, for people."""
    awaiting_call_ids: list[str] = []
    """Calls left open because a continuation task answers them (``conv_create``, ``conv_send``)."""
    checkpoint: Literal[0, 1, 2, 3, 4] = 0
    """Where an interrupt found the turn (docs/interrupts.md#checkpoints), which says what
    the history gets: 1, the reply was recorded and no call had begun: each call is answered with
    ``CANCEL_MESSAGE`` and ``INTERRUPT_MESSAGE`` follows; 2, every call was answered and the
    next request was not sent: ``INTERRUPT_TEXT`` is added to the last tool output; 3, a call
    had not begun, or 4, a call was running: each unanswered call gets ``CANCEL_MESSAGE``.
    0: anything else (a model request in flight, or not an interrupt): unanswered calls get
    ``aborted: <reason>``."""
    model_error: ModelErrorKind | None = None
    """For a turn the model failed (``reason="failed"``): what kind of failure (``auth``,
    ``rate_limited``, ``unavailable``, ``bad_request``, ``timeout``, ``malformed``,
    ``disconnected``); ``detail`` has the server's message."""


CANCEL_MESSAGE = "The user cancelled this tool call before it returned a result."
"""The output of a call an interrupt cancelled (checkpoints 1, 3 and 4)."""
INTERRUPT_MESSAGE = "[Request interrupted by the user for tool use]"
"""The user message an interrupt at checkpoint 1 adds."""
INTERRUPT_TEXT = "\n[Request interrupted by the user]"
"""What an interrupt at checkpoint 2 adds to the last tool output."""


# --- the model -------------------------------------------------------------------------------


class ModelRequested(Body, frozen=True):
    """A model request is about to be sent; hashes let replay compare what would be sent."""

    model: str
    """Model name."""
    tools_sha256: str
    """Hex sha-256 of the tool list sent."""
    instructions_sha256: str
    """Hex sha-256 of the system instructions sent."""
    messages_sha256: str = ""
    """Hex sha-256 over the history messages sent, each as canonical (key-sorted) JSON, in
    order; the system instructions have their own hash."""
    message_count: int = 0
    """How many messages were sent."""
    attempt: int = 1
    """1 for the first try, more for retries."""
    purpose: Literal["turn", "compact"] = "turn"
    """``compact``: the request asks for a summary of older history (its reply is not added
    to the history; ``HistoryCompacted`` follows)."""


class ModelRequestFailed(Body, frozen=True):
    """One attempt at a model request failed."""

    attempt: int
    """The attempt that failed."""
    error: str
    """What went wrong, for people."""
    status: int | None = None
    """HTTP status, when there was one."""
    retry_in_sec: float | None = None
    """Backoff before the next attempt; ``None`` when it will not be retried."""


class ModelResponded(Body, frozen=True):
    """The model's whole response: one assistant message with text and tool calls."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("text", "tool_calls", "reasoning")
    text: Content = ""
    """Assistant text."""
    tool_calls: list[ToolCall] = []
    """Tool calls in the model's order."""
    finish_reason: str | None = None
    """As the server reported it."""
    usage: Usage | None = None
    """Token usage, when the server sent it."""
    reasoning: Content = ""
    """Reasoning text the server streamed beside the reply (``reasoning_content`` or
    ``reasoning`` deltas), kept apart from it."""


class TokensCounted(Body, frozen=True):
    """Token usage of one model response, counted toward the conversation and session."""

    usage: Usage
    """The counts."""
    context_window: int | None = None
    """The model's context window, when known."""
    estimated: bool = False
    """plait counted, not the server: the request was interrupted before the server counted
    it, or the server sent no usage. Each count is then the JSON bytes divided by four (the
    prompt's as plait sent it, the reply's text and calls)."""


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

    VERSION: ClassVar[int] = 2  # v1 had no aborted_by: see events/upcasters.py
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


AnyBody = (
    SessionStarted
    | SessionClosed
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
    | McpAllowlistNormalized
)
"""Every persisted body type."""


class Event(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One stored event: where it sits in its stream, when, and what happened."""

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
