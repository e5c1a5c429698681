"""``McpPool``: a session's MCP servers, shared by its conversations, seen through their views.

The pool owns the session's ``McpServers`` (which live on the effect loop) and a catalog of
their tools that is a fold of the events it records: ``McpServerReady``, ``McpServerFailed``,
``McpToolsRefreshed``, ``McpToolWithheld``. A conversation asks it for its view at each turn
(the tools its allowlist lets it see, as the model is shown them, and the servers it must
still wait for) and hands it the MCP calls of a reply; each call's result comes back to the
conversation as a ``ToolFinished``. Calls wait, in order, under a per-conversation and a
session-wide limit. The pool never asks another actor, so nobody can wait on it in a cycle.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import msgspec
import pykka

from plait.actors.actor import Actor
from plait.actors.mcp.config import McpServerConfig
from plait.actors.mcp.names import Conflict, merge, openai_spec, qualify, tool_list_hash
from plait.actors.messages import (
    Allowlist,
    AwaitServers,
    CallTool,
    CancelCalls,
    CheckAllowlist,
    ServersSettled,
    ToolFinished,
    ToolResult,
    ToolView,
    ViewFor,
)
from plait.errors import ToolError
from plait.events.types import (
    Event,
    McpServerFailed,
    McpServerReady,
    McpToolsRefreshed,
    McpToolWithheld,
    NewEvent,
    ToolCallStarted,
)
from plait.events.values import InputImage, McpToolSnapshot

__all__ = ["McpLimits", "McpPool", "catalog_of"]

log = logging.getLogger("plait")

STARTUP_MARGIN_SEC = 5.0
"""How much longer than a server's startup timeout a turn waits before going on without it."""


class McpLimits(msgspec.Struct, frozen=True):
    """How many MCP calls may be in flight at once."""

    per_session: int = 8
    """In the whole session."""
    per_conversation: int = 4
    """In one conversation, under the session's limit."""
    per_conversation_rate: int | None = None
    """Calls one conversation may start within any ``rate_window_sec``; ``None``: no limit."""
    rate_window_sec: float = 60.0
    """The window of ``per_conversation_rate``."""


class _Catalog(msgspec.Struct):
    """What the log says of the servers: their tools, and which ones gave up for good."""

    tools: dict[str, list[McpToolSnapshot]] = {}
    """Each server's tools as last listed (kept while it restarts)."""
    settled: set[str] = set()
    """Servers that were ready once, or failed with no retry: nobody waits for them."""
    withheld: set[str] = set()
    """Names already recorded as withheld."""


def catalog_of(events: list[Event] | tuple[Event, ...]) -> dict[str, list[McpToolSnapshot]]:
    """Return each server's tools as the events last listed them."""
    catalog = _Catalog()
    for event in events:
        _fold(catalog, event)
    return catalog.tools


def _fold(catalog: _Catalog, event: Event) -> None:
    body = event.body
    if isinstance(body, McpServerReady | McpToolsRefreshed):
        catalog.tools[body.server] = list(body.tools)
        catalog.settled.add(body.server)
    elif isinstance(body, McpServerFailed) and body.retry_in_sec is None:
        catalog.settled.add(body.server)
    elif isinstance(body, McpToolWithheld):
        catalog.withheld.add(body.name)


class _Call(msgspec.Struct):
    request: CallTool
    snapshot: McpToolSnapshot
    server: str
    future: Any = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.request.conversation_id, self.request.token, self.request.index)


class McpPool(Actor):
    """The MCP servers of one session."""

    def __init__(
        self,
        journal: Any,
        effects: Any,
        configs: Mapping[str, McpServerConfig],
        past: list[Event],
        limits: McpLimits | None = None,
        servers_factory: Callable[..., Any] | None = None,
    ) -> None:
        """``servers_factory(configs, report)`` makes the servers (``McpServers`` by default;
        replay answers from the log instead)."""
        super().__init__()
        self.servers_factory = servers_factory
        self.journal = journal
        self.effects = effects
        self.configs = {name: c for name, c in sorted(configs.items()) if c.enabled}
        self.limits = limits or McpLimits()
        self.catalog = _Catalog()
        for event in past:
            _fold(self.catalog, event)
        self.tools: dict[str, McpToolSnapshot] = {}
        self.owner: dict[str, str] = {}
        self._merge()
        self.servers: Any = None
        self.queue: list[_Call] = []
        self.running: dict[tuple[str, int, int], _Call] = {}
        self.starts: dict[str, deque[float]] = {}  # each conversation's recent call starts

    def on_start(self) -> None:
        if not self.configs:
            return
        from plait.actors.mcp.servers import McpServers

        me = self.actor_ref

        def report(body: Any) -> None:  # on the loop thread: hand it to the actor
            with contextlib.suppress(pykka.ActorDeadError):
                me.tell(_Reported(body))

        self.servers = (self.servers_factory or McpServers)(self.configs, report)
        self.effects.submit(self.servers.start()).result(10)

    def on_stop(self) -> None:
        for call in self.running.values():
            if call.future is not None:
                call.future.cancel()
        if self.servers is not None:
            with contextlib.suppress(Exception):
                self.effects.submit(self.servers.close()).result(15)

    # --- the catalog ---------------------------------------------------------------------------

    def _merge(self) -> list[Conflict]:
        self.views: dict[tuple[str, ...] | None, ToolView] = {}
        tools, conflicts = merge(self.catalog.tools)
        self.tools = {tool.name: tool for tool in tools}
        self.owner = {
            tool.name: server for server, listed in self.catalog.tools.items() for tool in listed
        }
        return conflicts

    def _reported(self, body: Any) -> None:
        events = self.journal.record([body], origin=self.actor_ref)
        for event in events:
            _fold(self.catalog, event)
        fresh = [c for c in self._merge() if c.name not in self.catalog.withheld]
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
        needed = set(self.configs) if allowed is None else self._servers_of(allowed)
        waiting = tuple(sorted(s for s in needed if s not in self.catalog.settled))
        return msgspec.structs.replace(view, waiting=waiting) if waiting else view

    def _servers_of(self, names: tuple[str, ...]) -> set[str]:
        from plait.actors.mcp.names import server_of

        found = {server_of(name, self.configs) for name in names}
        return {server for server in found if server is not None}

    def _await(self, request: AwaitServers) -> None:
        """Tell ``request.reply_to`` once each server is ready, failed, or out of time."""
        servers = [s for s in request.servers if s in self.configs]
        if self.servers is None or not servers:
            _reply(request.reply_to, ServersSettled(request.token))
            return
        future = self.effects.submit(self._wait_ready(servers))
        future.add_done_callback(lambda _: _reply(request.reply_to, ServersSettled(request.token)))

    async def _wait_ready(self, servers: list[str]) -> None:
        import asyncio

        async def one(server: str) -> None:
            # Ready, or failed (its start gives up after startup_timeout_sec, and the failure
            # is recorded first): either way the view is settled. The margin only guards
            # against a server that neither starts nor fails.
            limit = self.configs[server].startup_timeout_sec + STARTUP_MARGIN_SEC
            with contextlib.suppress(Exception):
                await self.servers.wait_ready(server, limit)

        await asyncio.gather(*(one(server) for server in servers))

    def _check_allowlist(self, request: CheckAllowlist) -> Allowlist | str:
        """Normalize ``server/tool`` entries; refuse malformed ones and tools nobody offers.

        A tool of a server still starting cannot be checked yet: it is taken on trust.
        """
        from plait.actors.mcp.names import normalize_allowlist, server_of

        unsettled = [s for s in self.configs if s not in self.catalog.settled]
        given = [qualify(*e.split("/", 1)) if e.count("/") == 1 else e for e in request.entries]
        trusted = {name for name in given if server_of(name, unsettled) is not None}
        try:
            names, _ = normalize_allowlist(request.entries, {*self.tools, *trusted})
        except ToolError as exc:
            return str(exc)
        deprecated = [e for e in request.entries if "/" in e]
        became = [qualify(*e.split("/", 1)) for e in deprecated]
        return Allowlist(tuple(names), tuple(deprecated), tuple(became))

    # --- calls -------------------------------------------------------------------------------

    def _call(self, request: CallTool) -> None:
        tool = self.tools.get(request.name)
        if tool is None:
            result = ToolResult(f"no MCP tool {request.name!r} in this session", "refused")
            _reply(request.reply_to, ToolFinished(request.token, request.index, result))
            return
        self.queue.append(_Call(request, tool, self.owner[request.name]))
        self._dispatch()

    def _dispatch(self) -> None:
        """Send every queued call a slot is free for, in order; record their start first."""
        waiting: list[_Call] = []
        sending: list[_Call] = []
        blocked: set[str] = set()  # a conversation's later calls wait behind its first waiting one
        for call in self.queue:
            conversation = call.request.conversation_id
            busy = [*self.running, *(c.key for c in sending)]
            mine = sum(1 for key in busy if key[0] == conversation)
            full = len(busy) >= self.limits.per_session or mine >= self.limits.per_conversation
            if conversation in blocked or full or not self._within_rate(conversation):
                blocked.add(conversation)
                waiting.append(call)
            else:
                sending.append(call)
                self.starts.setdefault(conversation, deque()).append(time.monotonic())
        self.queue = waiting
        started = [
            NewEvent(
                ToolCallStarted(c.request.call_id, c.server),
                c.request.conversation_id,
                c.request.task_id,
            )
            for c in sending
            if not c.request.start_recorded
        ]
        if started:
            self.journal.record(started, origin=self.actor_ref)
        with self.journal.unsealed() as live:
            if not live:  # being stopped, or no longer this process's: nothing is sent
                return
            for call in sending:
                self._send(call)

    def _within_rate(self, conversation: str) -> bool:
        """Whether ``conversation`` may start a call now; if not, dispatch again when it may."""
        limit, window = self.limits.per_conversation_rate, self.limits.rate_window_sec
        starts = self.starts.get(conversation)
        if limit is None or not starts:
            return True
        now = time.monotonic()
        while starts and starts[0] <= now - window:
            starts.popleft()
        if len(starts) < limit:
            return True
        delay = starts[0] + window - now
        self.effects.loop.call_soon_threadsafe(
            lambda: self.effects.loop.call_later(delay, self._tell, _Wake())
        )
        return False

    def _send(self, call: _Call) -> None:
        request, key = call.request, call.key
        self.running[key] = call
        coroutine = self.servers.call(
            call.server, call.snapshot.tool, request.arguments, call_id=request.call_id
        )
        call.future = future = self.effects.submit(coroutine)

        def done(f: Future[Any]) -> None:  # on the loop: answer the caller first, directly
            if not f.cancelled():
                result = _result(request.name, f)
                _reply(request.reply_to, ToolFinished(request.token, request.index, result))
            self._tell(_Ended(key))

        future.add_done_callback(done)

    def _ended(self, ended: _Ended) -> None:
        self.running.pop(ended.key, None)
        self._dispatch()

    def _cancel(self, request: CancelCalls) -> None:
        self.queue = [
            c
            for c in self.queue
            if (c.request.conversation_id, c.request.token)
            != (request.conversation_id, request.token)
        ]
        for key, call in self.running.items():
            if key[:2] == (request.conversation_id, request.token) and call.future is not None:
                call.future.cancel()  # the server is told to cancel; the slot frees on _Ended

    # --- messages ----------------------------------------------------------------------------

    def _tell(self, message: Any) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(message)

    def on_receive(self, message: Any) -> Any:
        try:
            return self._receive(message)
        except Exception:
            log.exception("MCP pool %s: %s failed", self.journal.stream, type(message).__name__)
            return None

    def _receive(self, message: Any) -> Any:
        match message:
            case ViewFor():
                return self._view(message)
            case CheckAllowlist():
                return self._check_allowlist(message)
            case CallTool():
                self._call(message)
            case CancelCalls():
                self._cancel(message)
            case AwaitServers():
                self._await(message)
            case _Ended():
                self._ended(message)
            case _Reported(body=body):
                self._reported(body)
            case _Wake():
                self._dispatch()
        return None


class _Reported(msgspec.Struct, frozen=True):
    body: Any


class _Wake(msgspec.Struct, frozen=True):
    """A conversation's rate window has room again."""


class _Ended(msgspec.Struct, frozen=True):
    key: tuple[str, int, int]


def _result(name: str, future: Future[Any]) -> ToolResult:
    error = future.exception()
    if error is not None:  # McpServers.call reports failures as results: this is a bug
        return ToolResult(f"{name} failed: {error!r}", "error")
    done = future.result()
    images = tuple(InputImage(f"data:{mime};base64,{data}") for mime, data in done.images)
    return ToolResult(done.output, done.outcome, done.duration_ms, images, done.control)


def _reply(ref: Any, message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the conversation was destroyed meanwhile
        ref.tell(message)
