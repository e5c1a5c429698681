# plait: an event-sourced actor runtime for LLM agent sessions.
# Layers: `events` (the log) <- `actors` (sessions as actors) <- `telemetry` (spans from the
# log) <- `runtime` (the embedding API, crash recovery) <- `replay` (replay, fork, audit) <-
# `cli`. Nothing points back; nothing imports `cli`. This module is the documented surface:
# every type a public signature uses.
"""plait: replayable, auditable, crash-safe LLM agent sessions."""

import importlib

TYPE_CHECKING = False  # as typing has it, without importing typing (25 ms)

# Each name is imported where it is first used, so that ``import plait`` costs nothing: the
# ``plait`` command handles signals from its first line, before its heavy imports
# (docs/processes.md#stopping). Type checkers read the imports below.
if TYPE_CHECKING:
    from plait._errors import (
        ConcurrencyError,
        ConfigError,
        ContentUnavailableError,
        CorruptEventError,
        DivergenceError,
        ErasureError,
        InvalidInputError,
        KeyFileError,
        McpError,
        ModelError,
        ModelErrorKind,
        NotFoundError,
        PlaitError,
        ReplayError,
        SessionClosedError,
        StoreError,
        StoreUnavailableError,
        TamperedError,
        TelemetryError,
        ToolError,
        UnknownConversationError,
        UnknownSessionError,
    )
    from plait._jsonvalue import JsonObject, JsonValue
    from plait.actors import (
        ApprovalDecision,
        ApprovalRequest,
        Approver,
        Feed,
        McpLimits,
        ModelSettings,
    )
    from plait.actors.mcp import FunctionTool, McpServerConfig, tool
    from plait.events import (
        AbortCause,
        ApprovalPolicy,
        Event,
        EventStore,
        FeedLagged,
        FunctionCallOutput,
        HistorySettings,
        InputImage,
        InputItem,
        InputText,
        Signer,
        StoragePolicy,
        ToolPrefs,
        Transient,
    )
    from plait.events.projections import ConversationInfo, ConversationStats
    from plait.events.stores import MemoryStore, SqliteStore, open_store
    from plait.runtime import (
        KEEP,
        KeepType,
        Recovery,
        Runtime,
        RuntimeSettings,
        SessionHandle,
        Status,
        TaskOutcome,
    )
    from plait.telemetry import TelemetrySettings

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.actors": (
        "ApprovalDecision",
        "ApprovalRequest",
        "Approver",
        "Feed",
        "McpLimits",
        "ModelSettings",
    ),
    "plait.actors.mcp": ("FunctionTool", "McpServerConfig", "tool"),
    "plait._errors": (
        "ConcurrencyError",
        "ConfigError",
        "ContentUnavailableError",
        "CorruptEventError",
        "DivergenceError",
        "ErasureError",
        "InvalidInputError",
        "KeyFileError",
        "McpError",
        "ModelError",
        "ModelErrorKind",
        "NotFoundError",
        "PlaitError",
        "ReplayError",
        "SessionClosedError",
        "StoreError",
        "StoreUnavailableError",
        "TamperedError",
        "TelemetryError",
        "ToolError",
        "UnknownConversationError",
        "UnknownSessionError",
    ),
    "plait.events": (
        "AbortCause",
        "ApprovalPolicy",
        "Event",
        "EventStore",
        "FeedLagged",
        "FunctionCallOutput",
        "HistorySettings",
        "InputImage",
        "InputItem",
        "InputText",
        "Signer",
        "StoragePolicy",
        "ToolPrefs",
        "Transient",
    ),
    "plait.events.projections": ("ConversationInfo", "ConversationStats"),
    "plait.events.stores": ("MemoryStore", "SqliteStore", "open_store"),
    "plait._jsonvalue": ("JsonObject", "JsonValue"),
    "plait.runtime": (
        "KEEP",
        "KeepType",
        "Recovery",
        "Runtime",
        "RuntimeSettings",
        "SessionHandle",
        "Status",
        "TaskOutcome",
    ),
    "plait.telemetry": ("TelemetrySettings",),
}

__all__ = [
    "KEEP",
    "AbortCause",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "ConcurrencyError",
    "ConfigError",
    "ContentUnavailableError",
    "ConversationInfo",
    "ConversationStats",
    "CorruptEventError",
    "DivergenceError",
    "ErasureError",
    "Event",
    "EventStore",
    "Feed",
    "FeedLagged",
    "FunctionCallOutput",
    "FunctionTool",
    "HistorySettings",
    "InputImage",
    "InputItem",
    "InputText",
    "InvalidInputError",
    "JsonObject",
    "JsonValue",
    "KeepType",
    "KeyFileError",
    "McpError",
    "McpLimits",
    "McpServerConfig",
    "MemoryStore",
    "ModelError",
    "ModelErrorKind",
    "ModelSettings",
    "NotFoundError",
    "PlaitError",
    "Recovery",
    "ReplayError",
    "Runtime",
    "RuntimeSettings",
    "SessionClosedError",
    "SessionHandle",
    "Signer",
    "SqliteStore",
    "Status",
    "StoragePolicy",
    "StoreError",
    "StoreUnavailableError",
    "TamperedError",
    "TaskOutcome",
    "TelemetryError",
    "TelemetrySettings",
    "ToolError",
    "ToolPrefs",
    "Transient",
    "UnknownConversationError",
    "UnknownSessionError",
    "open_store",
    "tool",
]

__version__ = "0.1.0"


_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str) -> object:
    """Import a public name on its first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'plait' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next use finds it at once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
