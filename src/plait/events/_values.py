"""Value types that events carry: plans, input items, tool calls, usage, blob references."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec

from plait._errors import ConfigError
from plait.events._content import BlobRef, Content, Redacted, as_text

__all__ = [
    "APPROVAL_POLICIES",
    "DURATION_UNITS",
    "MODEL_PROTOCOL",
    "ApprovalPolicy",
    "BlobRef",
    "Closure",
    "CommandKey",
    "Content",
    "ContextChange",
    "FunctionCallOutput",
    "HistorySettings",
    "InputImage",
    "InputItem",
    "InputText",
    "McpToolSnapshot",
    "ModelOptions",
    "ReasoningItem",
    "RecordedSettings",
    "Redacted",
    "StoragePolicy",
    "TaskPlan",
    "ToolCall",
    "ToolPrefs",
    "Usage",
    "UtcDateTime",
    "as_text",
    "check_policy",
    "duration_sec",
    "stricter",
]

UtcDateTime = Annotated[datetime, msgspec.Meta(tz=True)]
"""An aware datetime; plait writes UTC only (msgpack keeps no offset)."""


# Event data is immutable and never forms reference cycles, so its structs are not tracked by
# the cyclic garbage collector (``gc=False``): a rebuild holding millions of them would otherwise
# spend half its time in collections that can free nothing.


class Value(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Base of event values; ``BLOB_FIELDS`` names string fields that may move to a blob."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ()


class InputText(Value, frozen=True, tag="input_text", tag_field="type"):
    """User or system text given to a task."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("text",)
    text: Content
    """The text."""


class InputImage(Value, frozen=True, tag="input_image", tag_field="type"):
    """An image given to a task, as a data: or http(s): URL."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("image_url",)
    image_url: Content
    """``data:image/...;base64,...`` or an ``http(s)://`` URL."""
    detail: Literal["auto", "low", "high"] = "auto"
    """The image detail the model is asked for."""


class FunctionCallOutput(Value, frozen=True, tag="function_call_output", tag_field="type"):
    """The result of a tool call that a continuation task hands back to the model."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("output",)
    call_id: str
    """The ``tool_call.id`` this output answers."""
    output: Content
    """The JSON payload of the tool, as a string."""


InputItem = InputText | InputImage | FunctionCallOutput


class Closure(Value, frozen=True):
    """The tool call a continuation task closes (docs/conversations.md#continuations)."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("first_user_message",)
    call_id: str
    """The ``tool_call.id`` of the interrupting call."""
    tool_name: str
    """The tool that interrupted, e.g. ``conv_create``."""
    target_task_id: str | None = None
    """The task whose final answer is the call's return value."""
    target_conversation_id: str | None = None
    """The conversation that task runs in."""
    first_user_message: Content | None = None
    """For ``conv_create``: the new conversation's first user message (echoed in the payload)."""
    first_items_count: int | None = None
    """For ``conv_create``: how many input items it was given."""


class ContextChange(Value, frozen=True):
    """A change of a live conversation's context, run as a task of its own
    (docs/conversations.md): queued like any task, so it applies from the next task's first
    turn, in the order the session saw it, and never between a tool call and its answer."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("base_instructions", "user_instructions")
    changed: list[str]
    """Names of the fields below that carry new values."""
    base_instructions: Content | None = None
    """New base instructions (``None``: the built-in default), if named in ``changed``."""
    user_instructions: Content | None = None
    """New standing user instructions, added to the history, if named in ``changed``."""
    mcp_allowlist: list[str] | None = None
    """New allowlist (``None``: every tool), if named in ``changed``."""
    tool_prefs: ToolPrefs | None = None
    """New built-in tool switches, if named in ``changed``."""
    clear_history: bool = False
    """Start the history afresh, with a message saying it was rebuilt."""
    approval_policy: ApprovalPolicy | None = None
    """New approval policy (``None``: the session's), if named in ``changed``; one wider than
    the session's is narrowed to it (``ApprovalPolicyNarrowed``)."""


class TaskPlan(Value, frozen=True):
    """A task waiting to run: where, with what input, and what call it closes."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = (
        "input_items",
        "base_instructions_override",
        "closure",
        "context",
    )
    task_id: str
    """The task's id (generated, so recorded here)."""
    conversation_id: str
    """The conversation the task runs in."""
    input_items: list[InputItem] = []
    """What the task feeds the model before its first turn."""
    base_instructions_override: Content | None = None
    """Instructions for this task only (compaction); never written back to the conversation."""
    closure: Closure | None = None
    """For a continuation: the interrupting call whose output is in ``input_items``."""
    chain_depth: int = 0
    """How many interrupting tools led to this task (bounded by ``max_interrupt_chain_depth``)."""
    context: ContextChange | None = None
    """For a context change: what changes; the task runs no model turn."""
    compact: int | None = None
    """A compaction asked for (``compact()``, ``plait compact``): the task summarises the
    conversation's older history, keeping about this many tokens of the latest as they are,
    and runs no other turn."""


class ToolCall(Value, frozen=True):
    """One tool call in a model response, as the model sent it."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("arguments",)
    id: str
    """The call id the model gave."""
    name: str
    """The tool's name on the wire (``conv_create``, ``server__tool``)."""
    arguments: Content
    """The arguments, a JSON string exactly as streamed (it may be invalid JSON)."""


class ReasoningItem(Value, frozen=True):
    """One reasoning item of a reply on the Responses API, kept whole so that the next
    request sends it back as the API requires (docs/models.md#reasoning-items)."""

    id: str = ""
    """The item's id as the server gave it (``rs_…``), kept for the record; not sent back:
    a server that keeps no responses would look it up and fail, and whole with its encrypted
    content the item needs nothing a server keeps."""
    summary: list[str] = []
    """The summary's texts, in order."""
    content: list[str] = []
    """The reasoning's own texts, when the server sends them (open-weight models do)."""
    encrypted_content: str = ""
    """The reasoning, encrypted by the server for the server (``include:
    ["reasoning.encrypted_content"]``): opaque here, sent back as it came."""


class Usage(Value, frozen=True):
    """Token counts reported for one model response."""

    prompt_tokens: int = 0
    """Tokens in the request."""
    completion_tokens: int = 0
    """Tokens generated."""
    total_tokens: int = 0
    """As reported by the server."""
    cached_tokens: int = 0
    """Prompt tokens served from the provider's cache."""
    reasoning_tokens: int = 0
    """Completion tokens spent on hidden reasoning."""


class ToolPrefs(Value, frozen=True):
    """Per-conversation switches for built-in tools (docs/conversations.md#tool-switches)."""

    include_plan_tool: bool = False
    """Offer the plan tool."""
    include_apply_patch_tool: bool = False
    """Offer the apply-patch tool."""
    web_search_request: bool = False
    """Offer web search."""
    conversation_tools: bool = True
    """Offer the ``conv_*`` built-ins."""


class HistorySettings(Value, frozen=True):
    """How long a conversation's history may grow (docs/compaction.md).

    Token counts are the model's own where a response reported them, and otherwise
    approximate: a message's JSON bytes divided by four.
    """

    context_window: int | None = None
    """The model's context window in tokens; ``None``: unknown, so no automatic compaction."""
    compact_threshold: float = 0.9
    """Compact before a turn whose prompt would pass this fraction of the context window."""
    keep_recent_tokens: int = 2048
    """About how many tokens of the latest history a compaction keeps verbatim."""
    max_items: int | None = None
    """Most messages a history keeps: past it, the oldest are removed down to three quarters
    of it (``None``: no bound)."""
    max_tokens: int | None = None
    """Most approximate tokens a history keeps, trimmed the same way (``None``: no bound)."""


class ModelOptions(Value, frozen=True):
    """What a session's model requests ask for beyond the messages and tools (``None``: the
    server's default), as ``SessionStarted`` records them. A resumed session is sent the
    resuming runtime's options, as it is its model name; ``send_reasoning``, which decides
    what its prompts hold, stays as the session started."""

    max_output_tokens: int | None = None
    """Most tokens a reply may have; a reply cut there ends its task ``truncated``."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field the cap is sent in (OpenAI's reasoning models take only the second)."""
    temperature: float | None = None
    """Sampling temperature."""
    top_p: float | None = None
    """Nucleus sampling mass."""
    seed: int | None = None
    """Sampling seed, for servers that honour it."""
    stop: list[str] | None = None
    """Sequences that end a reply."""
    reasoning_effort: str | None = None
    """``low``, ``medium``, ``high``... for reasoning models."""
    parallel_tool_calls: bool | None = None
    """Whether the model may make several tool calls in one reply."""
    extra_body: dict[str, Any] = {}
    """More request fields, sent as given (a server's own parameters)."""
    headers: dict[str, str] = {}
    """Extra HTTP headers sent with each request; the log keeps their names, with the value
    of any that looks like a credential replaced by ``[redacted]``."""
    send_reasoning: bool = False
    """Send a reply's reasoning back as ``reasoning_content`` on assistant messages with tool
    calls (DeepSeek's thinking mode requires it; OpenAI refuses it)."""
    wire_api: Literal["chat", "responses"] = "chat"
    """The API requests are sent in: Chat Completions (``/chat/completions``) or the
    Responses API (``/responses``), as Codex's ``wire_api`` says (docs/models.md#wires)."""
    store: bool = False
    """On the Responses API: the server keeps each response, and a request that goes on from
    the last reply names it (``previous_response_id``) and sends only what came after it
    (docs/models.md#stored-responses); false, every request sends the whole input."""


MODEL_PROTOCOL = 2
"""How new sessions talk to the model (``RecordedSettings.model_protocol``, docs/models.md)."""


class RecordedSettings(Value, frozen=True):
    """How the runtime running a session was configured: what replay must configure alike."""

    max_interrupt_chain_depth: int = 8
    """Nested interrupting tools allowed."""
    mcp_servers: list[str] = []
    """The configured MCP servers' names, sorted."""
    mcp_per_session: int = 8
    """MCP calls in flight at once in the session."""
    mcp_per_conversation: int = 4
    """MCP calls in flight at once in one conversation."""
    mcp_per_conversation_rate: int | None = None
    """Calls one conversation may start per ``mcp_rate_window_sec``; ``None``: no limit."""
    mcp_rate_window_sec: float = 60.0
    """The window of that rate."""
    workdir: str = ""
    """Where ``base_instruction_file`` paths were read from."""
    history: HistorySettings = HistorySettings()
    """Compaction and history bounds."""
    interrupt_checkpoints: bool = False
    """Interrupts follow their checkpoints (docs/interrupts.md#checkpoints) and count an
    interrupted request's tokens. Sessions started before they did record ``False`` (by
    omission), so they resume and replay as they ran."""
    model_protocol: int = 0
    """How requests are shaped and replies read (docs/models.md#the-protocol). 0, as sessions
    recorded before 1 existed: an assistant message with tool calls and no text is sent with
    ``"content": null``; a reply without usage counts no tokens; a reply cut off ends its task
    ``completed``; a compaction sends the history as it is. 1: that message omits
    ``content``, and a call's arguments that are not a JSON object are sent as ``{}``; a
    reply without usage is counted, estimated; a cut-off reply ends its task ``truncated``
    or ``filtered``; a compaction sends the history as one transcript. 2: as 1, but that
    message is sent with ``"content": ""``, which more servers accept
    (docs/models.md#content-shapes)."""
    model: ModelOptions = ModelOptions()
    """What each model request asks for beyond messages and tools."""
    resume_markers: bool = False
    """A process that takes over the session with work in flight records ``SessionResumed``
    first. Sessions started before it did record ``False`` (by omission): they resume
    without it, and replay finds where they were taken over as before
    (docs/replay.md#crashes)."""
    servers_per_run: bool = False
    """``mcp_servers`` are the ones the first run offers; a later run whose servers differ
    records ``McpServersOffered``, and only the tools of a run's servers are offered.
    Sessions started before it did record ``False`` (by omission): until a run records its
    servers, they offer every tool the log listed, as before
    (docs/replay.md#mcp-servers-per-run)."""
    handoff_answers: bool = False
    """A resumed session answers from its log a ``conv_create`` or ``conv_send`` call that a
    cut left with nothing queued to answer it, and drops the target's task nobody waits for;
    a call cut off before it handed its task on is answered saying its task did not run
    (docs/replay.md#hand-offs-a-fork-cut). Sessions started before it did record ``False``
    (by omission): they resume and replay as they ran. A fork made since does it whatever
    its source recorded (``ForkOrigin.full_recovery``)."""
    erasable: bool = False
    """Every content string is stored in a blob of this session alone, apart from the events
    the chain hashes, so ``forget`` can erase it and the chain and signatures still verify
    (docs/storage.md#erasure). Sessions started before it did record ``False`` (by
    omission): their small content is inside their hashed events and cannot be erased."""


DURATION_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
"""Seconds in each unit a duration may end with."""


def duration_sec(text: str) -> float:
    """Read a duration, ``90`` (seconds), ``90s``, ``15m``, ``2h`` or ``7d``, in seconds;
    ``ValueError`` if it is none."""
    text = text.strip()
    unit = DURATION_UNITS.get(text[-1:], 0)
    return float(text[:-1] if unit else text) * (unit or 1)


class StoragePolicy(Value, frozen=True):
    """What of a conversation the log keeps (docs/storage.md); a new conversation inherits its
    creator's. ``events/_storage.py`` says exactly what each kind stores.

    - ``full``: every event with its content.
    - ``headers_only``: every event; content fields hold only their sha-256 and size.
    - ``none``: only the conversation's lifecycle, its tasks' start and end, and errors.
    - ``ttl``: like ``full``, and content is deleted ``ttl_sec`` after it was recorded.
    """

    kind: Literal["full", "headers_only", "none", "ttl"] = "full"
    """Which policy."""
    ttl_sec: float | None = None
    """For ``ttl``: seconds after which content is deleted."""

    def __post_init__(self) -> None:
        if (self.kind == "ttl") != (self.ttl_sec is not None):
            raise ValueError("ttl_sec is given with kind 'ttl', and only with it")
        if self.ttl_sec is not None and not self.ttl_sec > 0:
            raise ValueError(f"ttl_sec must be positive, not {self.ttl_sec}")

    @classmethod
    def parse(cls, text: str) -> StoragePolicy:
        """Read ``full``, ``headers_only``, ``none`` or ``ttl:SECONDS`` (``ttl:90``, ``ttl:7d``:
        ``s``, ``m``, ``h`` and ``d`` suffixes); raise ``ValueError`` naming what is accepted."""
        kind, _, amount = text.strip().partition(":")
        if kind in ("full", "headers_only", "none") and not amount:
            return cls(kind)  # type: ignore[arg-type]
        try:
            if kind == "ttl":
                return cls("ttl", duration_sec(amount))
        except ValueError:
            pass
        raise ValueError(
            f"storage policy {text!r}: expected full, headers_only, none or ttl:SECONDS "
            "(e.g. ttl:3600, ttl:7d)"
        )


class McpToolSnapshot(Value, frozen=True):
    """One tool as an MCP server listed it when it became ready."""

    name: str
    """Fully-qualified name offered to the model, ``server__tool`` (shortened past 64 chars)."""
    tool: str
    """The tool's own name on its server."""
    description: str = ""
    """The server's description."""
    schema_sha256: str = ""
    """Hex sha-256 of the canonical JSON of its input schema."""
    read_only: bool = False
    """``ToolAnnotations.readOnlyHint`` (or the config's override)."""
    annotations: dict[str, str | bool | None] = {}
    """The other annotations, as the server sent them."""
    input_schema: str = ""
    """Its input schema as compact JSON, as the server sent it: what the model is shown and
    what arguments are checked against (``schema_sha256`` hashes its key-sorted form)."""
    idempotent: bool = False
    """``ToolAnnotations.idempotentHint`` (or the config's override): running it twice does
    what running it once does, so a call a crash cut off is run again."""


# --- approvals --------------------------------------------------------------------------------

ApprovalPolicy = Literal["never", "on-request", "on-write", "untrusted"]
"""When an MCP tool call waits for a decision before it runs (``APPROVAL_POLICIES`` orders
them, widest first): ``never``; ``on-request``, for tools that may be destructive (not
read-only, and ``destructiveHint`` not false); ``on-write``, for every tool that is not
read-only; ``untrusted``, for every MCP call."""

APPROVAL_POLICIES: tuple[ApprovalPolicy, ...] = ("never", "on-request", "on-write", "untrusted")
"""The approval policies, each asking for more than the one before."""


def check_policy(policy: object) -> None:
    """Raise ``ConfigError`` unless ``policy`` is one of ``APPROVAL_POLICIES``."""
    if policy not in APPROVAL_POLICIES:
        known = ", ".join(APPROVAL_POLICIES)
        raise ConfigError(f"approval policy {policy!r}: expected one of {known}")


def stricter(a: ApprovalPolicy, b: ApprovalPolicy | None) -> ApprovalPolicy:
    """The stricter of two policies (``None`` is no policy of its own: ``a``)."""
    if b is None:
        return a
    return a if APPROVAL_POLICIES.index(a) >= APPROVAL_POLICIES.index(b) else b


class CommandKey(Value, frozen=True):
    """A remembered approval (docs/approvals.md): calls it matches run without asking again."""

    tool: str
    """The fully-qualified tool name it approves."""
    args_pattern: str = "*"
    """An ``fnmatch`` pattern over the call's arguments as canonical JSON (keys sorted, no
    spaces: ``{"key":"a","text":"b"}``); ``*`` matches any arguments."""
    conversation_id: str | None = None
    """The conversation it holds in; ``None``: every conversation of the session."""
    expires_at: UtcDateTime | None = None
    """When it lapses, compared with the recorded time of events; ``None``: never."""
