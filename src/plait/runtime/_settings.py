"""``RuntimeSettings``: everything a ``Runtime`` is configured with, as one frozen value."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from plait.actors import DEFAULT_APPROVAL_TIMEOUT_SEC, ModelSettings
from plait.actors.mcp import McpLimits
from plait.events import (
    DEFAULT_LEASE_SEC,
    ApprovalPolicy,
    HistorySettings,
    StoragePolicy,
    check_policy,
)
from plait.telemetry import TelemetrySettings

if TYPE_CHECKING:
    from plait.actors import Approver
    from plait.actors.mcp import FunctionTool, McpServerConfig
    from plait.events import Signer

__all__ = ["RuntimeSettings", "new_uuid"]


def new_uuid() -> str:
    """A random UUID, as text: the ids a runtime gives its sessions, conversations and tasks."""
    return str(uuid.uuid4())


class RuntimeSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a ``Runtime`` runs its sessions: ``Runtime(store, RuntimeSettings(...))``.

    A value: one may configure several runtimes, and ``msgspec.structs.replace`` makes
    another with some fields changed. What a session must run again alike (its model
    options, history bounds, MCP limits...) it records at its start
    (``SessionStarted.settings``), so a resumed session keeps those it started with.
    """

    model: ModelSettings = ModelSettings()
    """The model server the sessions talk to, and what they ask of it."""
    workdir: str | Path = "."
    """Where a conversation's ``base_instruction_file`` is read from
    (docs/conversations.md); a path that resolves outside it is refused."""
    max_interrupt_chain_depth: int = 8
    """How many interrupting tools (``conv_create``, ``conv_send``) may nest in one chain."""
    new_id: Callable[[], str] = new_uuid
    """Makes the ids of new sessions, conversations and tasks."""
    mcp_servers: Mapping[str, McpServerConfig] = {}
    """MCP servers by name, which every session offers and all share
    (docs/tools.md#shared-servers)."""
    mcp_limits: McpLimits = McpLimits()
    """How many MCP calls may be in flight at once, in a session and in a conversation."""
    tools: Sequence[FunctionTool | Callable[..., object]] = ()
    """Python functions every session offers the model (``plait.tool``; a bare function is
    one with the defaults), beside its MCP servers' tools."""
    storage_policy: StoragePolicy = StoragePolicy()
    """What of a new session's conversations the log keeps (``full``; docs/storage.md)."""
    history: HistorySettings = HistorySettings()
    """New sessions' compaction and history bounds (a session keeps those it started with, so
    it resumes and replays alike); its ``context_window`` defaults to the model's."""
    expire_every_sec: float | None = 60.0
    """Once the runtime has a session with a ``ttl`` conversation (or ``ttl`` is the
    default), it deletes every so many seconds the content of the store's ``ttl``
    conversations that is due (``None``: only when ``expire_content`` is called, as ``plait
    expire`` does)."""
    approval_policy: ApprovalPolicy = "never"
    """New sessions' default: which MCP calls wait for a decision (``never``,
    ``on-request``, ``on-write``, ``untrusted``; docs/approvals.md)."""
    approver: Approver | None = None
    """Decides the calls that wait: a function or an async function of an
    ``ApprovalRequest``, returning an ``ApprovalDecision`` (``None``: every call that asks is
    denied)."""
    approval_timeout_sec: float = DEFAULT_APPROVAL_TIMEOUT_SEC
    """Seconds a call waits for the approver's decision before it is denied."""
    idle_sec: float | None = None
    """A session with nothing running or waiting, unused and silent for this long, is
    passivated: its actors stop and release their threads, and its handle brings them back
    from the log on the next call that needs them (``None``: never)."""
    max_active_sessions: int | None = None
    """At most this many sessions have running actors: a session that needs them when all
    places are taken makes one by passivating the least recently used idle session, or
    waits, in order, until one is idle (``start_session``, ``resume`` and the calls that
    queue work wait; ``arun`` and ``asubmit`` on the loop). ``None``: no bound."""
    max_running_tasks: int | None = None
    """At most this many tasks run at once, over all sessions: a task that finds every run
    slot taken stays queued in its session's log and starts when one is free, in the order
    the sessions came, holding no thread meanwhile (docs/processes.md#capacity). ``None``:
    no bound."""
    owner_id: str | None = None
    """Who holds the leases of the sessions the runtime opens, resumes or takes over
    (``None``: ``host:pid:random:where.start``); a session another live process owns is
    followed instead, its commands sent to that owner's inbox (docs/processes.md)."""
    lease_sec: float = DEFAULT_LEASE_SEC
    """How long a lease lasts unrenewed; the runtime renews its own every third of it."""
    signer: Signer | None = None
    """Signs a head after each task's end and at each close of every session the runtime
    writes (``Signer.from_key_file(path)``, or a fingerprint and a function that signs, as a
    KMS does; docs/event-log.md#signed-heads); plait never sees the key. ``None``: nothing
    is signed."""
    telemetry: TelemetrySettings = TelemetrySettings()
    """Where the spans and metrics of what the sessions record go over OTLP, as they are
    recorded (docs/telemetry.md#live); unset fields come from the standard
    ``OTEL_EXPORTER_OTLP_*`` variables, and with none set nothing is sent."""

    def __post_init__(self) -> None:
        check_policy(self.approval_policy)
