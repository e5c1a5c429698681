# plait: an event-sourced actor runtime for LLM agent sessions.
# Layers: `events` (the log) <- `actors` (the runtime) <- `replay` (replay, audit, recovery);
# the modules at this level wire them together. Nothing imports `cli`.
"""plait: replayable, auditable, crash-safe LLM agent sessions."""

from plait.actors.model import ModelSettings
from plait.errors import (
    ConcurrencyError,
    ConfigError,
    CorruptEventError,
    ModelError,
    PlaitError,
    StoreError,
    StoreUnavailableError,
)
from plait.events.store import EventStore
from plait.events.stores import open_store
from plait.events.stores.memory import MemoryStore
from plait.events.stores.sqlite import SqliteStore
from plait.runtime import Runtime, SessionHandle, TaskOutcome

__all__ = [
    "ConcurrencyError",
    "ConfigError",
    "CorruptEventError",
    "EventStore",
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
    "open_store",
]

__version__ = "0.1.0"
