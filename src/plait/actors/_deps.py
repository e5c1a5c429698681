"""``ConversationDeps``: what every conversation of a session shares.

The session's journal, the runtime's effect loop and model client, and the settings the
session recorded at its start; made once per session by the runtime (or replay's driver) and
handed to each ``Conversation`` and to what resolves its built-in tools' targets.
"""

from __future__ import annotations

import msgspec

from plait.actors._outside import NewId, ReadInstructions
from plait.actors._seams import (
    ApprovalGateLike,
    Effects,
    JournalLike,
    McpPoolRef,
    ModelClientLike,
    TaskGateLike,
)
from plait.events import MODEL_PROTOCOL, HistorySettings, ModelOptions

__all__ = ["ConversationDeps"]


class ConversationDeps(msgspec.Struct, frozen=True):
    """What every conversation of a session shares: the journal, effects, model, settings."""

    journal: JournalLike
    """The session's ``Journal``."""
    effects: Effects
    """The runtime's ``EffectLoop``."""
    model_client: ModelClientLike
    """The ``ModelClient`` (replay's answers from the log)."""
    model: str
    """Model name, recorded in ``ModelRequested``."""
    new_id: NewId
    """Makes the ids of what a tool call makes (they enter the log as data)."""
    read_instructions: ReadInstructions
    """Reads a ``conv_create`` call's ``base_instruction_file`` (inside the working
    directory, live; from the log, in a replay)."""
    max_interrupt_chain_depth: int = 8
    """Nested interrupting tools allowed before the tool returns an error instead."""
    pool: McpPoolRef | None = None
    """The session's ``McpPool``; ``None`` when it has no MCP servers."""
    history: HistorySettings = HistorySettings()
    """Compaction and history bounds."""
    interrupt_checkpoints: bool = True
    """Interrupts stop at their checkpoints (docs/interrupts.md#checkpoints; ``False``: as
    sessions recorded before them)."""
    approval_gate: ApprovalGateLike | None = None
    """The runtime's ``ApprovalGate`` (replay's answers from the log); ``None``: no approver,
    so every call that must ask is denied."""
    model_protocol: int = MODEL_PROTOCOL
    """How requests are shaped and replies read (``RecordedSettings.model_protocol``)."""
    model_options: ModelOptions = ModelOptions()
    """What each model request asks for beyond messages and tools."""
    task_gate: TaskGateLike | None = None
    """The runtime's run slots, which the session's scheduler takes before it starts a task
    (``None``: no bound)."""
