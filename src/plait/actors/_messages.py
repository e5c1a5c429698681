"""The commands and notices the actors of a session send each other: frozen msgspec Structs.

Commands are imperative (``RunTask``, ``Abort``); notices say what happened (``TaskEnded``,
``CatchUp``). Every field is immutable data, so a message can cross threads safely.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from plait._errors import ModelErrorKind
from plait.actors._builtins import Arguments
from plait.actors._stream import ModelReply
from plait.events import (
    AbortCause,
    ContextChange,
    InputImage,
    InterruptCause,
    McpToolSnapshot,
    TaskPlan,
    ToolApprovalDecided,
    ToolCallCompleted,
    ToolPrefs,
)

if TYPE_CHECKING:  # it imports nothing at run time: msgspec never encodes a message's ref
    from plait.actors._refs import Recipient

__all__ = [
    "Abort",
    "Allowlist",
    "ApprovalFinished",
    "AttemptFailedNotice",
    "AwaitServers",
    "BuiltinCall",
    "CallTool",
    "CancelCalls",
    "CatchUp",
    "CheckAllowlist",
    "Destroy",
    "Enqueue",
    "GetHistory",
    "GetQueue",
    "Interrupt",
    "ListConversations",
    "ModelFinished",
    "OpenConversation",
    "RunTask",
    "ServersSettled",
    "StartNext",
    "Stop",
    "TaskEnded",
    "ToolFinished",
    "ToolResult",
    "ToolView",
    "ViewFor",
    "frozen_names",
]


class CatchUp(msgspec.Struct, frozen=True):
    """Fold what the others recorded (``Journal.recorded``): much has piled up for you."""


class RunTask(msgspec.Struct, frozen=True):
    """Run this task (its ``TaskStarted`` is recorded already) in the receiving conversation."""

    plan: TaskPlan
    """The task."""


class Abort(msgspec.Struct, frozen=True):
    """End the running task now, if it is ``task_id``."""

    task_id: str
    """The task to end."""
    reason: Literal["interrupted", "replaced", "failed"]
    """Recorded in ``TurnAborted``."""
    cause: AbortCause
    """Recorded in ``TurnAborted``."""
    detail: str = ""
    """For people."""
    destroy: bool = False
    """Record the conversation's destruction with the abort (``conv.destroy`` of a running one)."""
    at_checkpoint: bool = False
    """Not now: let what runs end, start nothing more, and end the task at its next
    checkpoint (docs/interrupts.md#stopping-at-a-checkpoint)."""


class ModelFinished(msgspec.Struct, frozen=True):
    """A model call ended (reply or error); ``token`` tells a stale call from the current one."""

    token: int
    """The turn the call belongs to."""
    reply: ModelReply | None = None
    """The ``ModelReply`` on success."""
    error: str | None = None
    """What went wrong, for people."""
    error_kind: ModelErrorKind | None = None
    """For a ``ModelError``: its kind (``auth``, ``rate_limited``...)."""


class ToolResult(msgspec.Struct, frozen=True):
    """How one tool call ended: the fields of its ``ToolCallCompleted``."""

    output: str
    """What the model is shown."""
    outcome: Literal["ok", "error", "timeout", "refused"] = "ok"
    """How it ended."""
    duration_ms: float = 0.0
    """Wall time of the call, measured where it ran."""
    images: tuple[InputImage, ...] = ()
    """Images the tool returned (``data:`` URLs), kept as attachments."""
    control: ContextChange | None = None
    """A context change the tool's result asks for."""

    def completed(self, call_id: str) -> ToolCallCompleted:
        """The event that records this result for call ``call_id``."""
        return ToolCallCompleted(
            call_id, self.output, self.outcome, self.duration_ms, list(self.images), self.control
        )


class ToolFinished(msgspec.Struct, frozen=True):
    """A tool call run elsewhere (on the effect loop) ended."""

    token: int
    """The turn the call belongs to; a stale one is dropped."""
    index: int
    """The call's position in the model's reply."""
    result: ToolResult
    """How it ended."""


class ApprovalFinished(msgspec.Struct, frozen=True):
    """A tool call's approval was decided (on the effect loop); record it, then run or refuse."""

    token: int
    """The turn the call belongs to; a stale one (the turn was aborted) is dropped."""
    index: int
    """The call's position in the model's reply."""
    decision: ToolApprovalDecided
    """What to record."""


class AttemptFailedNotice(msgspec.Struct, frozen=True):
    """One model attempt failed and may be retried; recorded as ``ModelRequestFailed``."""

    token: int
    """The turn the call belongs to."""
    attempt: int
    """Which attempt."""
    error: str
    """What went wrong."""
    status: int | None
    """HTTP status, if any."""
    retry_in_sec: float | None
    """Backoff before the next attempt, ``None`` when this was the last."""


class Enqueue(msgspec.Struct, frozen=True):
    """Queue tasks at the back of the session's timeline."""

    plans: tuple[TaskPlan, ...]
    """In order."""
    ack: Callable[[BaseException | None], object] | None = None
    """Called once their ``TaskEnqueued`` is durable (with ``None``), or with why it is not."""
    once: bool = False
    """Skip a plan whose task id the session already holds (a command from the inbox or a
    submit naming its task, made again); the ``ack`` is then called once that task's
    ``TaskEnqueued`` is durable. A replay leaves it off: it queues what the log recorded,
    duplicates of an older plait included (docs/processes.md#each-command-takes-effect-once)."""


class TaskEnded(msgspec.Struct, frozen=True):
    """The running task ended (completed or aborted); the timeline may move on."""

    task_id: str
    """The task."""


class Interrupt(msgspec.Struct, frozen=True):
    """End the running task and drop the chain it started."""

    cause: InterruptCause = "user"
    """Who interrupts: the embedder, or the session's close."""


class Stop(msgspec.Struct, frozen=True):
    """Start no more tasks, and end the running one with the cause ``shutdown``: the process
    stops on purpose and hands the session back (docs/processes.md#stopping)."""

    detail: str = "the process stopped"
    """Recorded in ``StopRequested`` and ``TurnAborted``, for people."""
    at_checkpoint: bool = False
    """End it at its next checkpoint, letting a streaming reply or a running tool call end
    first (docs/interrupts.md#stopping-at-a-checkpoint), not now. A ``Stop`` after it cuts what
    still runs."""


class GetQueue(msgspec.Struct, frozen=True):
    """Ask the scheduler what runs and waits; the reply is a ``QueueSnapshot``."""


class StartNext(msgspec.Struct, frozen=True):
    """Start the next waiting task if none runs (after a resume, or a recovery's end)."""


class OpenConversation(msgspec.Struct, frozen=True):
    """Open a conversation (``conv_create``); the reply is its id or an error message."""

    conversation_id: str
    """Its id, made for the call that creates it."""
    parent_id: str
    """The calling conversation, whose context is inherited."""
    base_instructions: str | None
    """Its base instructions, already read from a file if one was named."""
    inherit_base: bool
    """True when neither text nor file was given: inherit the parent's."""
    mcp_allowlist: tuple[str, ...] | None
    """``None``: inherit the parent's view."""
    tool_prefs: ToolPrefs | None
    """``None``: inherit the parent's."""


class BuiltinCall(msgspec.Struct, frozen=True):
    """A non-interrupting built-in (``conv_list``, ``conv_history``, ``conv_destroy``)."""

    caller_id: str
    """The calling conversation."""
    name: str
    """Wire name of the tool."""
    arguments: Arguments
    """Its parsed arguments."""


class ListConversations(msgspec.Struct, frozen=True):
    """Ask the session for its live conversations; the reply is a tuple of frozen
    ``ConversationInfo`` rows (``conv.list``), computed inside the actor."""


class GetHistory(msgspec.Struct, frozen=True):
    """Ask the session for a conversation's history; the reply is a tuple of OpenAI chat
    messages (fresh dicts the caller owns), or ``None`` if there is no such conversation."""

    conversation_id: str
    """The conversation."""


class Destroy(msgspec.Struct, frozen=True):
    """Destroy a conversation (API or ``conv_destroy``); the reply is the tool's payload."""

    conversation_id: str
    """The conversation."""
    caller_id: str | None = None
    """The calling conversation, when a tool asks."""


# --- the MCP pool -------------------------------------------------------------------------------


class ViewFor(msgspec.Struct, frozen=True):
    """Ask the pool which MCP tools a conversation sees now; the reply is a ``ToolView``."""

    allowlist: tuple[str, ...] | None
    """The conversation's allowlist (fully-qualified names); ``None``: every tool."""


def frozen_names(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """An allowlist as messages carry it: a tuple (``None`` stays ``None``: every tool)."""
    return None if names is None else tuple(names)


class ToolView(msgspec.Struct, frozen=True):
    """The MCP tools a conversation sees, as the model is shown them."""

    tools: tuple[McpToolSnapshot, ...] = ()
    """Sorted by fully-qualified name."""
    specs: tuple[dict[str, object], ...] = ()
    """The Chat Completions tool specs, in the same order."""
    sha256: str = ""
    """Hash of ``specs``."""
    waiting: tuple[str, ...] = ()
    """Servers of the view still starting: a turn waits for them (up to their timeout)."""


class AwaitServers(msgspec.Struct, frozen=True):
    """Tell ``reply_to`` a ``ServersSettled`` once these servers are ready, failed or late."""

    servers: tuple[str, ...]
    """Configured server names."""
    token: int
    """The turn that waits."""
    reply_to: Recipient
    """The conversation's actor ref."""


class ServersSettled(msgspec.Struct, frozen=True):
    """The servers a turn waited for are ready, failed or out of time: build the prompt."""

    token: int
    """The turn that waited."""


class CallTool(msgspec.Struct, frozen=True):
    """Run an MCP tool call; its ``ToolFinished`` goes to ``reply_to``."""

    conversation_id: str
    """The calling conversation (its concurrency limit applies)."""
    task_id: str
    """Its running task."""
    call_id: str
    """The model's call id."""
    token: int
    """The calling turn."""
    index: int
    """The call's position in the model's reply."""
    name: str
    """Fully-qualified tool name."""
    arguments: str
    """The arguments as the model sent them (JSON text, checked against the schema)."""
    reply_to: Recipient
    """The conversation's actor ref."""
    start_recorded: bool = False
    """Its ``ToolCallStarted`` is already in the log (a call run again after a crash)."""


class CancelCalls(msgspec.Struct, frozen=True):
    """Drop the queued and cancel the running calls of a turn that was aborted."""

    conversation_id: str
    """The conversation."""
    token: int
    """The aborted turn."""


class CheckAllowlist(msgspec.Struct, frozen=True):
    """Check and normalize an ``mcp_allowlist``; the reply is an ``Allowlist`` or an error text."""

    entries: tuple[str, ...]
    """As the caller gave them (``server__tool``, or the deprecated ``server/tool``)."""


class Allowlist(msgspec.Struct, frozen=True):
    """A checked allowlist."""

    names: tuple[str, ...]
    """Fully-qualified names, sorted."""
    deprecated: tuple[str, ...] = ()
    """Entries given as ``server/tool``."""
    became: tuple[str, ...] = ()
    """What each deprecated entry became, in the same order."""
