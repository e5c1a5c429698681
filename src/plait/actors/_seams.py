"""The seams of the actors wing: what an actor calls, typed as it calls it.

Each seam is a ``typing.Protocol`` naming only what the actors use, so that whatever stands in
for the real part (replay's model, servers and approver that answer from the log,
``replay/_effects.py``) is checked against it by ``mypy --strict``, where it is handed over
(``runtime.Outside``, ``McpPool``'s ``servers_factory``), not found wanting at run time.

- ``Recipient``: an actor as the others tell it things: pykka's ``ActorRef`` (a conversation's
  ref, to which a call's or a model request's outcome is told). ``Askable`` also asks it and
  waits for the answer (the session, as a conversation asks it).
- ``JournalLike``: the session's ``Journal`` as its actors use it: record (``ahead`` or not),
  ``flush`` what was made ahead, hold the seal off while starting something outside
  (``unsealed``), publish transient deltas, fail the session; ``listeners``, through which
  an actor folds what the others recorded (docs/event-log.md#writing-ahead); and ``tasks``,
  the session's one fold of its task queue, held still while the scheduler reads it.
- ``Effects``: the ``EffectLoop``, the asyncio loop on which every model and MCP call runs.
- ``ModelClientLike``: the ``ModelClient`` as a conversation calls it (replay's
  ``ReplayModel``).
- ``McpServersLike``: a session's ``McpServers`` as the pool drives them (replay's
  ``ReplayServers``), made by a ``ServersFactory`` from the configs and the pool's ``Report``.
- ``McpPoolRef``: the ``PoolRef`` through which a conversation calls the session's MCP pool.
- ``ApprovalGateLike``: the ``ApprovalGate`` that decides a call's approval (replay's
  ``ReplayApprovals``).
- ``TaskGateLike``: the runtime's ``TaskGate``, whose run slots bound the tasks running at once
  in the process; a session's scheduler takes one before it starts a task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

from plait.actors._refs import Askable, Recipient

if TYPE_CHECKING:
    from plait._errors import PlaitError, SessionFailedError
    from plait._jsonvalue import JsonValue
    from plait.actors._approvals import ApprovalRequest
    from plait.actors._feed import Feed, Kinds
    from plait.actors._listening import Listeners
    from plait.actors._messages import CallTool
    from plait.actors._model import AttemptFailed, ModelReply, ModelRequest

    # from their modules, not the face: the face names `dispatch`, which imports this module
    from plait.actors.mcp._calls import CallResult
    from plait.actors.mcp._config import McpServerConfig
    from plait.actors.mcp._servers import Report
    from plait.events import (
        Body,
        Event,
        NewEvent,
        ToolApprovalDecided,
        ToolCallStarted,
        Transient,
    )
    from plait.events.projections import ContentShape, TaskQueue

__all__ = [
    "ApprovalGateLike",
    "Askable",
    "Effects",
    "JournalLike",
    "McpPoolRef",
    "McpServersLike",
    "ModelClientLike",
    "Recipient",
    "ServersFactory",
    "TaskGateLike",
]

T = TypeVar("T")


class JournalLike(Protocol):
    """The session's journal as its actors record through it (``Journal``)."""

    @property
    def stream(self) -> str:
        """The session's id (its stream)."""
        ...

    @property
    def listeners(self) -> Listeners:
        """The actors that fold what the others record."""
        ...

    @property
    def lost(self) -> PlaitError | None:
        """Why the session stopped in this process, if it failed or was lost."""
        ...

    @property
    def wants_deltas(self) -> bool:
        """Whether a live feed takes transient notifications."""
        ...

    @property
    def waiting(self) -> bool:
        """Whether a task waits to start, by what was recorded."""
        ...

    def tasks(self) -> AbstractContextManager[TaskQueue]:
        """The task queue folded from what was recorded, held still while it is read."""
        ...

    def record(
        self,
        items: Sequence[Body | NewEvent],
        origin: Recipient | None = None,
        *,
        ahead: bool = False,
    ) -> list[Event]:
        """Append ``items`` as one group (``ahead``: made, to write with ``flush``)."""
        ...

    def record_last(self, items: Sequence[Body | NewEvent]) -> list[Event]:
        """Append what the owner records once the actors are stopped."""
        ...

    def flush(self) -> bool:
        """Write what was made ahead; whether it is durable."""
        ...

    def when_durable(self, then: Callable[[PlaitError | None], object]) -> None:
        """Call ``then`` once what was made ahead so far is written, or with why not."""
        ...

    def unsealed(self) -> AbstractContextManager[bool]:
        """Hold the seal off while something outside starts; yields whether it may."""
        ...

    def publish(self, notice: Transient) -> None:
        """Hand a transient notification to the live feeds."""
        ...

    def feed(self, transient: bool = ..., limit: int = ..., kinds: Kinds | None = None) -> Feed:
        """A live feed of what is recorded from now on."""
        ...

    def fail(self, error: SessionFailedError) -> None:
        """Stop the session in this process: an actor broke."""
        ...


class Effects(Protocol):
    """The effect loop: where model and MCP calls run, off the actors' threads."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop, for ``call_soon_threadsafe``."""
        ...

    @property
    def closed(self) -> bool:
        """Whether it is closed: nothing more can be started on it."""
        ...

    def submit(self, coro: Coroutine[object, None, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; cancelling the future cancels it."""
        ...


class ModelClientLike(Protocol):
    """The model client as a conversation calls it (``ModelClient``)."""

    @property
    def content_shape(self) -> ContentShape | None:
        """The shape it sends assistant messages with tool calls and no text in, once its
        server took no other; ``None``: as the session's protocol encodes them."""
        ...

    def complete(
        self,
        request: ModelRequest,
        *,
        on_text: Callable[[str], None] = ...,
        on_attempt_failed: Callable[[AttemptFailed], None] = ...,
        on_reasoning: Callable[[str], None] = ...,
        on_sent: Callable[[], object] = ...,
    ) -> Coroutine[object, None, ModelReply]:
        """Stream one completion (run on the effect loop)."""
        ...

    async def aclose(self) -> None:
        """Close its connections (on the effect loop)."""
        ...


class McpServersLike(Protocol):
    """A session's MCP servers, as the pool drives them on the effect loop (``McpServers``)."""

    async def start(self, lazy: Collection[str] = ()) -> None:
        """Start the servers but those of ``lazy``, which start when first needed (in the
        background: each reports when it is ready)."""
        ...

    async def close(self) -> None:
        """Stop them all."""
        ...

    async def wait_ready(self, server: str, timeout: float | None = None) -> object:
        """Wait until ``server`` is ready; ``McpError`` if it failed."""
        ...

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        timeout: float | None = None,
        *,
        call_id: str = "",
    ) -> CallResult:
        """Call ``tool`` of ``server``; a failure comes back as a result, not raised."""
        ...


ServersFactory = Callable[["Mapping[str, McpServerConfig]", "Report"], McpServersLike]
"""Makes a session's servers from their configs and the pool's ``Report`` (which hands a
lifecycle fact, ``McpServerReady``..., from the loop to the pool)."""


class McpPoolRef(Askable, Protocol):
    """The session's MCP pool, as a conversation calls it (``PoolRef``)."""

    later: frozenset[str]
    """The servers it starts at their first call, not at once."""

    def hold(self, requests: Sequence[CallTool]) -> list[ToolCallStarted]:
        """Take a slot for each of a reply's first calls that may start now."""
        ...

    def call(self, request: CallTool) -> None:
        """Start an MCP call, or queue it."""
        ...

    def stop(self, *, timeout: float | None = None) -> object:
        """Stop the pool and its servers."""
        ...


class ApprovalGateLike(Protocol):
    """What decides whether a call may run (``ApprovalGate``), on the effect loop."""

    async def decide(self, request: ApprovalRequest) -> ToolApprovalDecided:
        """The decision to record for ``request``."""
        ...


class TaskGateLike(Protocol):
    """The runtime's run slots, as a session's scheduler takes them (``TaskGate``)."""

    def enter(self, holder: str, wake: Callable[[], object]) -> bool:
        """Take a slot for session ``holder``'s next task (``True``: it holds one), or wait in
        line: ``wake`` is called once one is held for it."""
        ...

    def leave(self, holder: str) -> None:
        """Give back ``holder``'s slot, or its place in line."""
        ...
