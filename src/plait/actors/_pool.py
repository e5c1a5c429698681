"""``McpPool``: a session's MCP servers, shared by its conversations, seen through their views.

The pool owns the session's ``McpServers`` (which live on the effect loop) and a catalog of
their tools that is a fold of the events it records: ``McpServerReady``, ``McpServerFailed``,
``McpToolsRefreshed``, ``McpToolWithheld``. A conversation asks it for its view at each turn
(the tools its allowlist lets it see, as the model is shown them, and the servers it must
still wait for). The MCP calls of a reply do not pass through its inbox: its ref
(``PoolRef``) hands them to its ``Dispatcher``, which starts them on the caller's thread
under a per-conversation and a session-wide limit (calls that must wait are queued, in
order, and started by the pool's thread); each call's result comes back to the conversation
as a ``ToolFinished``, from the effect loop. The pool never asks another actor, so nobody
can wait on it in a cycle.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import msgspec
import pykka

from plait._errors import ToolError
from plait.actors._actor import Actor
from plait.actors._messages import (
    Allowlist,
    AwaitServers,
    CallTool,
    CancelCalls,
    CheckAllowlist,
    ServersSettled,
    ToolView,
    ViewFor,
)
from plait.actors._seams import (
    Effects,
    JournalLike,
    McpServersLike,
    Recipient,
    ServersFactory,
)
from plait.actors.mcp import (
    FUNCTIONS,
    FUNCTIONS_CONFIG,
    Conflict,
    Dispatcher,
    FunctionTool,
    McpLimits,
    McpServerConfig,
    merge,
    openai_spec,
    qualify,
    tool_list_hash,
)
from plait.events import (
    Body,
    Event,
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolSnapshot,
    McpToolsRefreshed,
    McpToolWithheld,
    SessionStarted,
    ToolCallStarted,
)

if TYPE_CHECKING:  # loaded with the servers, when the pool starts them
    from plait.actors.mcp import SharedServers

__all__ = [
    "McpLimits",
    "McpPool",
    "PoolRef",
    "offer_servers",
    "offered_of",
]

log = logging.getLogger("plait")

STARTUP_MARGIN_SEC = 5.0
"""How much longer than a server's startup timeout a turn waits before going on without it."""


class _Catalog(msgspec.Struct):
    """What the log says of the servers: their tools, and which ones gave up for good."""

    tools: dict[str, list[McpToolSnapshot]] = {}
    """Each server's tools as last listed (kept while it restarts)."""
    settled: set[str] = set()
    """Servers that were ready once, or failed with no retry: nobody waits for them."""
    withheld: set[str] = set()
    """Names already recorded as withheld."""
    offered: set[str] | None = None
    """The servers the session's latest run offers (``SessionStarted.settings``, then each
    ``McpServersOffered``); ``None`` where the log does not say (older sessions): every
    configured one."""


def offered_of(events: list[Event] | tuple[Event, ...]) -> list[str] | None:
    """Return the MCP servers the session's latest run offers, as the events last said
    (``None``: they do not say)."""
    catalog = _Catalog()
    for event in events:
        _fold(catalog, event)
    return None if catalog.offered is None else sorted(catalog.offered)


def _started_when_needed(
    configs: Mapping[str, McpServerConfig], listed: Collection[str]
) -> frozenset[str]:
    """The servers of ``configs`` a session starts at their first call rather than at once:
    those whose tools its log lists (``listed``: the servers its catalog lists), which it offers
    until then; but the ``required`` ones, which must be up before a task runs, and its
    function tools, which cost nothing to start (docs/tools.md#started-when-needed)."""
    return frozenset(
        name
        for name, config in configs.items()
        if name in listed and not config.required and name != FUNCTIONS
    )


def offer_servers(
    journal: JournalLike, configs: Mapping[str, McpServerConfig], past: list[Event]
) -> list[Event]:
    """Record the servers a run offers (the enabled ones of ``configs``) where they differ
    from what ``past`` last said, so that a replay offers each run what it had
    (docs/replay.md#mcp-servers-per-run); return what was recorded."""
    offered = sorted(name for name, config in configs.items() if config.enabled)
    if offered_of(past) == offered:
        return []
    return journal.record([McpServersOffered(offered)])


def _fold(catalog: _Catalog, event: Event) -> None:
    body = event.body
    if isinstance(body, McpServerReady | McpToolsRefreshed):
        catalog.tools[body.server] = list(body.tools)
        catalog.settled.add(body.server)
    elif isinstance(body, McpServerFailed) and body.retry_in_sec is None:
        catalog.settled.add(body.server)
    elif isinstance(body, McpToolWithheld):
        catalog.withheld.add(body.name)
    elif isinstance(body, McpServersOffered):
        catalog.offered = set(body.servers)
    elif isinstance(body, SessionStarted) and body.settings and body.settings.servers_per_run:
        catalog.offered = set(body.settings.mcp_servers)


class McpPool(Actor):
    """The MCP servers of one session."""

    def __init__(
        self,
        journal: JournalLike,
        effects: Effects,
        configs: Mapping[str, McpServerConfig],
        past: list[Event],
        limits: McpLimits | None = None,
        servers_factory: ServersFactory | None = None,
        functions: Sequence[FunctionTool] = (),
        shared: SharedServers | None = None,
    ) -> None:
        """``servers_factory(configs, report)`` makes the servers (``McpServers`` by default,
        on the runtime's ``shared`` servers; replay answers from the log instead).
        ``functions`` are served among them, as the server ``FUNCTIONS``."""
        super().__init__()
        self.servers_factory = servers_factory
        self.shared = shared
        self.functions = functions
        self.journal = journal
        self.effects = effects
        self.configs = {name: c for name, c in sorted(configs.items()) if c.enabled}
        if functions:
            self.configs[FUNCTIONS] = FUNCTIONS_CONFIG
        self.limits = limits or McpLimits()
        self.catalog = _Catalog()
        for event in past:
            _fold(self.catalog, event)
        self.tools: dict[str, McpToolSnapshot] = {}
        self.owner: dict[str, str] = {}
        self.servers: McpServersLike | None = None
        self.later: frozenset[str] = frozenset()
        """The servers started at their first call, not with the pool."""
        ref = self.actor_ref

        def wake() -> None:  # any thread: start the calls that waited, on the pool's thread
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(_Wake())

        self.calls = Dispatcher(journal, effects, self.limits, ref, wake)
        self._merge()

    @classmethod
    def open(
        cls,
        journal: JournalLike,
        effects: Effects,
        configs: Mapping[str, McpServerConfig],
        past: list[Event],
        limits: McpLimits | None = None,
        servers_factory: ServersFactory | None = None,
        functions: Sequence[FunctionTool] = (),
        shared: SharedServers | None = None,
    ) -> PoolRef:
        """Start a pool; return the ref its conversations call through (pykka's own ref, and
        the pool's ``Dispatcher`` beside it)."""
        ref = cls.start(journal, effects, configs, past, limits, servers_factory, functions, shared)
        calls, later = cast(tuple[Dispatcher, frozenset[str]], ref.ask(_Calls(), timeout=30))
        return PoolRef(ref, calls, later)

    def startup(self) -> None:
        if not self.configs:
            return
        from plait.actors.mcp import McpServers

        me = self.actor_ref

        def report(body: Body) -> None:  # on the loop thread: hand it to the actor
            with contextlib.suppress(pykka.ActorDeadError):
                me.tell(_Reported(body))

        if self.servers_factory is not None:
            self.servers = self.servers_factory(self.configs, report)
        else:
            functions, shared = self.functions, self.shared
            self.servers = McpServers(self.configs, report, functions=functions, shared=shared)
        # A server whose tools the log lists starts at its first call: its tools are offered
        # from the log until then (docs/tools.md#started-when-needed).
        offered = {server: self.configs[server] for server in self._offered()}
        self.later = _started_when_needed(offered, self.catalog.tools)
        self.effects.submit(self.servers.start(self.later)).result(10)
        self.calls.servers = self.servers

    def on_stop(self) -> None:
        self.calls.stop()
        if self.servers is not None:
            with contextlib.suppress(Exception):
                self.effects.submit(self.servers.close()).result(15)

    # --- the catalog ---------------------------------------------------------------------------

    def _offers(self, server: str) -> bool:
        """Whether the run offers ``server``'s tools: those of servers a later run dropped
        stay in the catalog, unoffered (docs/replay.md#mcp-servers-per-run)."""
        offered = self.catalog.offered
        return offered is None or server in offered or server == FUNCTIONS

    def _offered(self) -> list[str]:
        """The configured servers the run offers (in a replay, the pool is configured with
        every server the log names, and the log says which ones each run had)."""
        return [server for server in self.configs if self._offers(server)]

    def _merge(self) -> list[Conflict]:
        self.views: dict[tuple[str, ...] | None, ToolView] = {}
        offered = {s: listed for s, listed in self.catalog.tools.items() if self._offers(s)}
        tools, conflicts = merge(offered)
        self.tools = {tool.name: tool for tool in tools}
        self.owner = {tool.name: server for server, listed in offered.items() for tool in listed}
        self.calls.offer({name: (tool, self.owner[name]) for name, tool in self.tools.items()})
        return conflicts

    def _reported(self, body: Body) -> None:
        events = self.journal.record([body], origin=self.actor_ref)
        for event in events:
            _fold(self.catalog, event)
        conflicts = self._merge()
        if isinstance(body, McpServersOffered):
            return  # a run's start (replayed): its pool records no conflict as it starts
        fresh = [c for c in conflicts if c.name not in self.catalog.withheld]
        if fresh:
            withheld = [McpToolWithheld(c.name, c.servers, c.schema_sha256s) for c in fresh]
            for conflict in fresh:
                log.warning("%s", conflict.message())
            for event in self.journal.record(withheld, origin=self.actor_ref):
                _fold(self.catalog, event)

    # --- views -------------------------------------------------------------------------------

    def _view(self, request: ViewFor) -> ToolView:
        allowed = None if request.allowlist is None else tuple(sorted(set(request.allowlist)))
        view = self.views.get(allowed)
        if view is None:  # built once per allowlist and catalog: a turn only looks it up
            names = (
                sorted(self.tools) if allowed is None else [n for n in allowed if n in self.tools]
            )
            tools = tuple(self.tools[name] for name in names)
            specs = tuple(openai_spec(tool) for tool in tools)
            view = self.views[allowed] = ToolView(tools, specs, tool_list_hash(specs))
        needed = set(self._offered()) if allowed is None else self._servers_of(allowed)
        waiting = tuple(sorted(s for s in needed if s not in self.catalog.settled))
        return msgspec.structs.replace(view, waiting=waiting) if waiting else view

    def _servers_of(self, names: tuple[str, ...]) -> set[str]:
        found = {_server_of(name, self._offered()) for name in names}
        return {server for server in found if server is not None}

    def _await(self, request: AwaitServers) -> None:
        """Tell ``request.reply_to`` once each server is ready, failed, or out of time."""
        servers = [s for s in request.servers if s in self.configs]
        if self.servers is None or not servers:
            _reply(request.reply_to, ServersSettled(request.token))
            return
        future = self.effects.submit(self._wait_ready(self.servers, servers))
        future.add_done_callback(lambda _: _reply(request.reply_to, ServersSettled(request.token)))

    async def _wait_ready(self, started: McpServersLike, servers: list[str]) -> None:
        import asyncio

        async def one(server: str) -> None:
            # Ready, or failed (its start gives up after startup_timeout_sec, and the failure
            # is recorded first): either way the view is settled. The margin only guards
            # against a server that neither starts nor fails.
            limit = self.configs[server].startup_timeout_sec + STARTUP_MARGIN_SEC
            with contextlib.suppress(Exception):
                await started.wait_ready(server, limit)

        await asyncio.gather(*(one(server) for server in servers))

    def _check_allowlist(self, request: CheckAllowlist) -> Allowlist | str:
        """Normalize ``server/tool`` entries; refuse malformed ones and tools nobody offers.

        A tool of a server still starting cannot be checked yet: it is taken on trust.
        """
        from plait.actors.mcp import normalize_allowlist

        unsettled = [s for s in self._offered() if s not in self.catalog.settled]
        given = [qualify(*e.split("/", 1)) if e.count("/") == 1 else e for e in request.entries]
        trusted = {name for name in given if _server_of(name, unsettled) is not None}
        try:
            names, _ = normalize_allowlist(request.entries, {*self.tools, *trusted})
        except ToolError as exc:
            return str(exc)
        deprecated = [e for e in request.entries if "/" in e]
        became = [qualify(*e.split("/", 1)) for e in deprecated]
        return Allowlist(tuple(names), tuple(deprecated), tuple(became))

    # --- messages ----------------------------------------------------------------------------

    def role(self, message: object) -> str:
        return "the MCP pool"

    def receive(self, message: object) -> object:
        match message:
            case ViewFor():
                return self._view(message)
            case CheckAllowlist():
                return self._check_allowlist(message)
            case CallTool():
                self.calls.call(message)
            case CancelCalls():
                self.calls.cancel(message.conversation_id, message.token)
            case AwaitServers():
                self._await(message)
            case _Reported(body=body):
                self._reported(body)
            case _Wake():
                self.calls.dispatch()
            case _Calls():
                return self.calls, self.later
        return None


class _Reported(msgspec.Struct, frozen=True):
    body: Body


class _Wake(msgspec.Struct, frozen=True):
    """A call that waited may start: a slot freed, or a conversation's rate window has room."""


class _Calls(msgspec.Struct, frozen=True):
    """Answered with the pool's ``Dispatcher`` and the servers it starts at their first call
    (once, by ``McpPool.open``)."""


class PoolRef:
    """The pool's ref, through which a conversation starts its calls on its own thread."""

    def __init__(
        self, ref: pykka.ActorRef[McpPool], calls: Dispatcher, later: frozenset[str]
    ) -> None:
        self.ref = ref
        self.calls = calls
        self.later = later
        """The servers started at their first call: their tools are offered as the session's
        log lists them until then (docs/tools.md#started-when-needed)."""
        self.actor_urn = ref.actor_urn
        self.tell = ref.tell
        self.ask = ref.ask
        self.stop = ref.stop
        self.is_alive = ref.is_alive

    def __repr__(self) -> str:
        return repr(self.ref)

    def hold(self, requests: Sequence[CallTool]) -> list[ToolCallStarted]:
        """Take a slot for each of a reply's first calls that may start now (see
        ``Dispatcher.hold``); record the starts returned with the reply, then ``call``."""
        if self.calls.servers is None or not self.is_alive():
            return []  # not started yet (its calls go through the inbox), or stopped
        return self.calls.hold(requests)

    def call(self, request: CallTool) -> None:
        """Start an MCP call, or queue it; its ``ToolFinished`` goes to ``request.reply_to``."""
        if not self.is_alive():
            raise pykka.ActorDeadError(f"{self.ref} not found")  # as a tell would
        if self.calls.servers is None:  # handled once the pool has started
            self.tell(request)
        else:
            self.calls.call(request)


def _server_of(name: str, servers: Collection[str]) -> str | None:
    """The server among ``servers`` that offers the tool ``name``: by its ``server__``
    prefix, else ``FUNCTIONS`` (a function tool's name holds no ``__``)."""
    from plait.actors.mcp import SEPARATOR, server_of

    found = server_of(name, servers)
    if found is None and SEPARATOR not in name and FUNCTIONS in servers:
        return FUNCTIONS
    return found


def _reply(ref: Recipient, message: object) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the conversation was destroyed meanwhile
        ref.tell(message)
