# plait: an event-sourced actor runtime for LLM agent sessions.
# Layers: `events` (the log) <- `actors` (the runtime) <- `replay` (replay, audit, recovery);
# the modules at this level wire them together. Nothing imports `cli`.
"""plait: replayable, auditable, crash-safe LLM agent sessions."""

from plait.actors.approvals import ApprovalDecision, ApprovalRequest, Approver
from plait.actors.mcp.config import McpServerConfig
from plait.actors.model import ModelSettings
from plait.actors.pool import McpLimits
from plait.errors import (
    ConcurrencyError,
    ConfigError,
    CorruptEventError,
    McpError,
    ModelError,
    PlaitError,
    StoreError,
    StoreUnavailableError,
    ToolError,
)
from plait.events.store import EventStore
from plait.events.stores import open_store
from plait.events.stores.memory import MemoryStore
from plait.events.stores.sqlite import SqliteStore
from plait.events.values import HistorySettings
from plait.runtime import Runtime, SessionHandle, TaskOutcome

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "ConcurrencyError",
    "ConfigError",
    "CorruptEventError",
    "EventStore",
    "HistorySettings",
    "McpError",
    "McpLimits",
    "McpServerConfig",
    "MemoryStore",
    "ModelError",
    "ModelSettings",
    "PlaitError",
    "Runtime",
    "SessionHandle",
    "SqliteStore",
    "StoreError",
    "StoreUnavailableError",
    "TaskOutcome",
    "ToolError",
    "open_store",
]

__version__ = "0.1.0"
