"""What happens to tasks and turns, and to the model requests they make
(docs/conversations.md#the-single-timeline, docs/interrupts.md).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from plait._errors import ModelErrorKind
from plait.events._values import (
    Content,
    ReasoningItem,
    TaskPlan,
    ToolCall,
    Usage,
)
from plait.events.bodies._base import Body

__all__ = [
    "CANCEL_MESSAGE",
    "INTERRUPT_MESSAGE",
    "INTERRUPT_TEXT",
    "AbortCause",
    "InterruptCause",
    "ModelRequestFailed",
    "ModelRequested",
    "ModelResponded",
    "StopRequested",
    "TaskCompleted",
    "TaskDropped",
    "TaskEnqueued",
    "TaskStarted",
    "TokensCounted",
    "TurnAborted",
    "TurnStarted",
]


# --- tasks and turns -------------------------------------------------------------------------

AbortCause = Literal[
    "user",
    "close",
    "forced_close",
    "destroy",
    "replaced",
    "crash",
    "model",
    "error",
    "shutdown",
    "fork",
]
"""What ended a task early, or cut off a call (docs/interrupts.md#causes): ``user`` (an
interrupt by the embedder), ``close`` (the session's close interrupted it), ``forced_close``
(it did not stop within the close's timeout), ``destroy`` (its conversation was destroyed),
``replaced`` (an interrupting tool handed the timeline to another task), ``crash`` (the process
stopped), ``model`` (the model server failed), ``error`` (plait refused or failed to go on),
``shutdown`` (the process stopped on purpose, a SIGTERM or a drain with a grace period, and
handed the session back), ``fork`` (a fork's copy ended between a ``conv_create`` or
``conv_send`` call and its answer: recorded when the fork is resumed)."""
InterruptCause = Literal["user", "close"]
"""The causes that interrupt the running task and drop the chain it started."""


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

    VERSION: ClassVar[int] = 2  # v1 had no cause: see events/_upcasters.py
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

    VERSION: ClassVar[int] = 2  # v1 had no cause: see events/_upcasters.py
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


class StopRequested(Body, frozen=True):
    """The process is stopping on purpose (docs/processes.md#stopping) while the task named in
    the envelope runs: it starts no new model request and no tool call, lets what runs end and
    records it, and ends ``TurnAborted(cause="shutdown")`` at its next checkpoint
    (docs/interrupts.md#stopping-at-a-checkpoint)."""

    detail: str = ""
    """Why, for people (the ``TurnAborted`` that follows says the same)."""


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
    wire_api: Literal["chat", "responses"] = "chat"
    """The API it was sent in (docs/models.md#wires): the runtime's at each start or resume,
    so a session may change it between runs; the hashes are of the history either way."""
    store: bool = False
    """On the Responses API: the server was asked to keep the response."""
    previous_response_id: str = ""
    """On the Responses API: the stored response it goes on from, sending only the history
    after it (docs/models.md#stored-responses); empty: it sends the whole history."""


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
    """As the server reported it; ``length`` when plait cut the reply (``cut_by``)."""
    usage: Usage | None = None
    """Token usage, when the server sent it."""
    reasoning: Content = ""
    """Reasoning text the server streamed beside the reply (``reasoning_content`` or
    ``reasoning`` deltas), kept apart from it."""
    cut_by: str | None = None
    """The ``[model]`` limit at which plait stopped reading the reply and closed the stream:
    ``max_output_tokens`` (counted as it streamed), ``max_reply_bytes`` or ``max_reply_sec``;
    the reply holds what came before. ``None``: the server ended it."""
    response_id: str = ""
    """The response's id as the server gave it (``chatcmpl-…``); empty if it gave none, or
    for replies recorded before plait kept it."""
    response_model: str = ""
    """The model that answered, as the server named it (it may differ from the one asked
    for); empty if it named none."""
    reasoning_items: list[ReasoningItem] = []
    """The reply's reasoning items, on the Responses API: sent back with the next request
    (docs/models.md#reasoning-items)."""


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
