"""What can be configured: one struct per table of ``plait.toml`` (``[model]``, ``[store]``,
``[policy]``, ``[history]``), and ``Config``, all of them after loading (``config.py`` reads
them; ``plait._config`` exports them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from plait._project import STORE

__all__ = [
    "DEFAULT_STORE",
    "AuditConfig",
    "HistoryConfig",
    "ModelConfig",
    "PolicyConfig",
    "StoreConfig",
]

DEFAULT_STORE = str(STORE)
"""The store when none is configured: a SQLite file under the project's directory."""

# Numbers with a range: a value outside it is refused when the file is read, key named.
_Positive = Annotated[float, Meta(gt=0)]
_AtLeastOne = Annotated[int, Meta(ge=1)]


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[model]``: the OpenAI-compatible server."""

    base_url: str | None = None
    """The server's base URL (``.../v1``; ``OPENAI_BASE_URL`` overrides it); ``None``:
    OpenAI's."""
    model: str = "gpt-4o-mini"
    """The model name sent with each request (``PLAIT_MODEL`` overrides it)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key (keys never go in the file)."""
    context_window: _AtLeastOne | None = None
    """The model's context window in tokens, when known."""
    timeout_sec: _Positive = 60.0
    """Seconds to connect, and the longest silence inside a stream."""
    max_attempts: _AtLeastOne = 3
    """Requests sent at most for one completion."""
    max_reply_bytes: _AtLeastOne = 8 << 20
    """Most bytes of a reply kept (text, reasoning, call arguments); past them plait stops
    reading it and its task ends ``truncated``."""
    max_reply_sec: _Positive = 600.0
    """Most seconds a reply may stream; then it is cut the same way."""
    max_output_tokens: _AtLeastOne | None = None
    """Most tokens a reply may have; a reply cut there ends its task ``truncated``."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field the cap goes in (OpenAI's reasoning models take only the second)."""
    temperature: Annotated[float, Meta(ge=0)] | None = None
    """Sampling temperature (unset: the server's default)."""
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
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
    """More request fields, sent as given (a table: a server's own parameters)."""
    headers: dict[str, str] = {}
    """Extra HTTP headers for each request (keys stay out of files: a header that carries
    one belongs in a proxy's configuration, not here)."""
    send_reasoning: bool = False
    """Send a reply's reasoning back on assistant messages with tool calls, as
    ``reasoning_content`` (DeepSeek's thinking mode requires it; OpenAI refuses it)."""
    wire_api: Literal["chat", "responses"] = "chat"
    """The API requests are sent in, as Codex's key says: ``chat`` (Chat Completions) or
    ``responses`` (the Responses API, which keeps a reasoning model's reasoning between
    turns: docs/models.md#wires)."""
    store: bool = False
    """On the Responses API: the server keeps each response, and a request sends only what
    came after the last one (docs/models.md#stored-responses)."""


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[store]``: where the event log lives."""

    url: str = DEFAULT_STORE
    """A SQLite path (relative to the file's directory), ``memory:`` or ``postgresql://...``;
    unset: the project's ``.plait/plait.db`` (``plait._project``)."""
    busy_timeout_sec: Annotated[float, Meta(ge=0)] = 5.0
    """Seconds to wait for another process's write lock on a SQLite store before giving up."""


class PolicyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[policy]``: limits that hold for every session."""

    approval: Literal["never", "on-request", "on-write", "untrusted"] = "never"
    """Which MCP tool calls wait for a decision: ``never``; ``on-request``, those of tools
    that may be destructive; ``on-write``, of every tool that is not read-only;
    ``untrusted``, every call. ``plait chat`` asks at the terminal; ``plait exec`` has nobody
    to ask, so such calls are denied."""
    approval_timeout_sec: _Positive = 300.0
    """Seconds a call waits for its decision before it is denied."""
    max_interrupt_chain_depth: Annotated[int, Meta(ge=0)] = 8
    """Nested ``conv_create``/``conv_send`` allowed before the tool answers with an error."""
    max_concurrent_tool_calls: _AtLeastOne = 8
    """MCP calls in flight at once in a session; more wait, in order."""
    max_concurrent_tool_calls_per_conversation: _AtLeastOne = 4
    """MCP calls in flight at once in one conversation, under the session's cap."""
    storage: str = "full"
    """New sessions' storage policy: ``full``, ``headers_only``, ``none`` or ``ttl:SECONDS``
    (``ttl:7d``; see ``StoragePolicy.parse``)."""


class HistoryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[history]``: compaction and history bounds (``model.context_window`` enables automatic
    compaction)."""

    compact_threshold: Annotated[float, Meta(gt=0, le=1)] = 0.9
    """Compact before a turn whose prompt would pass this fraction of the context window."""
    keep_recent_tokens: Annotated[int, Meta(ge=0)] = 2048
    """About how many tokens of the latest history a compaction keeps as they are."""
    max_items: _AtLeastOne | None = None
    """Most messages a conversation's history keeps; the oldest go first."""
    max_tokens: _AtLeastOne | None = None
    """Most approximate tokens a conversation's history keeps; the oldest go first."""


class AuditConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[audit]``: what makes a session's log evidence (docs/event-log.md#signed-heads)."""

    signing_key: str | None = None
    """The Ed25519 private key (``plait keygen``) that signs the heads of the sessions plait
    writes; relative to the file that names it. ``PLAIT_SIGNING_KEY`` sets it too. Unset: no
    head is signed."""
    witness: str | None = None
    """The witness file each signed head is appended to as well (docs/event-log.md#the-witness);
    relative to the file that names it. ``PLAIT_WITNESS`` sets it too. Unset: ``PATH.heads``
    beside the signing key ``PATH``."""


class TelemetryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[telemetry]``: OpenTelemetry GenAI spans and metrics over OTLP (docs/telemetry.md)."""

    otlp_endpoint: str | None = None
    """The OTLP/HTTP base URL (``http://127.0.0.1:4318``); unset: ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    and with neither nothing is exported."""
    headers: dict[str, str] = {}
    """Headers sent with each export (a backend's API key), beside
    ``OTEL_EXPORTER_OTLP_HEADERS``."""
    service_name: str | None = None
    """The ``service.name`` of the spans; unset: ``OTEL_SERVICE_NAME``, else ``plait``."""
    capture_message_content: bool | None = None
    """Put messages, instructions, tool arguments and results on the spans; unset:
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. Off by default."""
    metrics: bool = True
    """Export metrics beside the spans."""


class Config(msgspec.Struct, frozen=True):
    """Everything configurable, after files, environment and overrides were applied."""

    model: ModelConfig = ModelConfig()
    """The model server."""
    store: StoreConfig = StoreConfig()
    """The event log."""
    policy: PolicyConfig = PolicyConfig()
    """Session-wide limits."""
    history: HistoryConfig = HistoryConfig()
    """Compaction and history bounds."""
    audit: AuditConfig = AuditConfig()
    """Signed heads."""
    mcp_servers: dict[str, Any] = {}
    """MCP servers by name (``McpServerConfig`` values)."""
    api_key: str | None = None
    """The API key read from ``model.api_key_env``; ``None`` when unset."""
    source: str = "defaults"
    """The files the configuration was read from, for messages."""
    mcp_problem: str | None = None
    """What is wrong with the MCP servers' configuration, when it was loaded with
    ``mcp_servers=False`` (``mcp_servers`` is then empty)."""
    telemetry: TelemetryConfig = TelemetryConfig()
    """Where spans and metrics go."""
