"""``McpServers``: a session's MCP servers, started in the background and kept running.

Every method runs on the effect loop (submit the coroutines with ``EffectLoop.submit``).
Each enabled server gets a supervisor task that starts it, reports what happens, and
restarts it with exponential backoff if it dies after it was ready. What happens is reported
as event bodies through one callback (``McpServerReady``, ``McpServerFailed``,
``McpToolsRefreshed``), called on the loop thread, in order, so the caller can record them.
A server that cannot start at all is not retried: a missing command will not appear later.
The session's function tools are served among them, as server ``FUNCTIONS``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from plait.actors.mcp.calls import CallResult
from plait.actors.mcp.config import McpServerConfig
from plait.actors.mcp.functions import FUNCTIONS, FunctionConnection, FunctionTool
from plait.errors import McpError
from plait.events.types import Body, McpServerFailed, McpServerReady, McpToolsRefreshed
from plait.events.values import McpToolSnapshot
from plait.jsonvalue import JsonValue

if TYPE_CHECKING:  # client.py imports mcp: loaded when the first server starts, not before
    from plait.actors.mcp.client import McpConnection

__all__ = ["Backoff", "McpServers", "Report", "Status"]

log = logging.getLogger("plait.mcp")

Report = Callable[[Body], None]
"""Receives each lifecycle fact as the event body to record; called on the loop thread."""
Status = Literal["pending", "starting", "ready", "restarting", "failed", "disabled", "closed"]
"""Where a server is in its life."""


class Backoff(msgspec.Struct, frozen=True):
    """When to restart a server that died: ``initial_sec``, doubling up to ``max_sec``."""

    initial_sec: float = 0.5
    """Delay before the first restart."""
    max_sec: float = 30.0
    """Longest delay."""
    max_failures: int = 5
    """Consecutive failures (deaths or failed restarts) after which it stays down."""
    stable_sec: float = 60.0
    """Up this long, a server's failure count starts again from zero."""

    def delay(self, failures: int) -> float:
        """Return the delay after ``failures`` consecutive failures (1 for the first)."""
        return float(min(self.initial_sec * 2 ** max(failures - 1, 0), self.max_sec))


class _Server:
    """One server's mutable state; only the loop thread touches it."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.status: Status = "pending" if config.enabled else "disabled"
        self.reason = "disabled in its config" if not config.enabled else ""
        self.tools: list[McpToolSnapshot] = []
        self.attempt = 0
        self.conn: McpConnection | FunctionConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    def set(self, status: Status, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()  # wakes everyone waiting on the state before this one


class McpServers:
    """The MCP servers of one session, by configured name."""

    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        report: Report,
        *,
        backoff: Backoff | None = None,
        functions: Sequence[FunctionTool] = (),
    ) -> None:
        """Prepare (without starting) every configured server; create it on the effect loop.
        ``functions`` are served as the server ``FUNCTIONS`` (which ``configs`` names)."""
        self._servers = {name: _Server(name, config) for name, config in configs.items()}
        self._functions = functions
        self._report_to = report
        self._backoff = backoff or Backoff()
        self._closing = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every enabled server in the background; return at once."""
        if self._closing:
            raise McpError("MCP servers are closed")
        for server in self._servers.values():
            if server.status == "pending":
                server.set("starting")
                server.task = asyncio.create_task(
                    self._supervise(server), name=f"mcp:{server.name}"
                )

    async def close(self) -> None:
        """Stop every server and wait until none is left running. Idempotent."""
        self._closing = True
        await asyncio.gather(*(self._close(s) for s in self._servers.values()))

    async def _close(self, server: _Server) -> None:
        if server.conn is not None:
            await server.conn.close()
        if server.task is not None:
            server.task.cancel()
            await asyncio.gather(server.task, return_exceptions=True)
        if server.conn is not None:
            await server.conn.close()  # one the supervisor created while we waited
        if server.status != "disabled":
            server.set("closed", "the session closed it")

    async def _supervise(self, server: _Server) -> None:
        try:
            await self._keep_running(server)
        except Exception as exc:  # a bug of ours: say so rather than leave waiters hanging
            log.exception("MCP server %r: supervisor failed", server.name)
            reason = f"plait failed to supervise it: {exc!r}"
            self._report(McpServerFailed(server.name, reason, max(server.attempt, 1), None))
            server.set("failed", reason)

    async def _keep_running(self, server: _Server) -> None:
        if server.name != FUNCTIONS:
            # Importing mcp takes about a second: not on the loop, where model streams run too.
            await asyncio.to_thread(importlib.import_module, "plait.actors.mcp.client")
        failures = 0
        loop = asyncio.get_running_loop()
        while not self._closing:
            server.attempt += 1
            conn = server.conn = self._connect(server)
            try:
                tools = await conn.start()
            except McpError as exc:
                failures += 1
                reason = str(exc).removeprefix(f"MCP server {server.name!r}: ")
                if not await self._failed(server, reason, failures, first=server.attempt == 1):
                    return
                continue
            up_since = loop.time()
            server.tools = tools
            server.set("ready")
            self._report(McpServerReady(server.name, tools, server.attempt))
            died = await conn.wait_closed()
            if died is None or self._closing:
                return
            if loop.time() - up_since >= self._backoff.stable_sec:
                failures = 0
            failures += 1
            if not await self._failed(server, died, failures, first=False):
                return

    def _connect(self, server: _Server) -> McpConnection | FunctionConnection:
        if server.name == FUNCTIONS:
            return FunctionConnection(self._functions)
        from plait.actors.mcp.client import McpConnection

        return McpConnection(
            server.name, server.config, on_tools_changed=lambda t: self._refreshed(server, t)
        )

    async def _failed(self, server: _Server, reason: str, failures: int, *, first: bool) -> bool:
        """Report a failure and wait out the backoff; return whether to start again."""
        if self._closing:
            return False
        retry = None if first or failures >= self._backoff.max_failures else failures
        delay = self._backoff.delay(retry) if retry is not None else None
        self._report(McpServerFailed(server.name, reason, server.attempt, delay))
        if delay is None:
            server.set("failed", reason)
            return False
        server.set("restarting", reason)
        await asyncio.sleep(delay)
        return not self._closing

    def _refreshed(self, server: _Server, tools: list[McpToolSnapshot]) -> None:
        server.tools = tools
        self._report(McpToolsRefreshed(server.name, tools))

    def _report(self, body: Body) -> None:
        try:
            self._report_to(body)
        except Exception:  # the recorder's problem must not stop the servers
            log.exception("reporting %s failed", type(body).__name__)

    # --- queries -----------------------------------------------------------------------------

    def status(self, server: str) -> Status:
        """Return where ``server`` is in its life; ``McpError`` if it is not configured."""
        return self._get(server).status

    def tools(self) -> dict[str, list[McpToolSnapshot]]:
        """Return the tools of every server that has been ready, as last listed.

        A server being restarted keeps its last listing, so prompts do not change while it
        comes back; a call to it waits for it.
        """
        return {
            name: server.tools
            for name, server in sorted(self._servers.items())
            if server.status in ("ready", "restarting")
        }

    def connection(self, server: str) -> McpConnection | FunctionConnection | None:
        """Return the live connection of ``server``, if it is ready (for tests and tools)."""
        entry = self._get(server)
        return entry.conn if entry.status == "ready" else None

    async def wait_ready(self, server: str, timeout: float | None = None) -> list[McpToolSnapshot]:
        """Wait until ``server`` is ready and return its tools.

        ``timeout`` defaults to its ``startup_timeout_sec``. Raises ``McpError`` if it is not
        configured, disabled, failed for good, closed, or still not ready in time.
        """
        entry = self._get(server)
        if entry.status != "ready":  # the usual case, ready, costs no wait (and no timer)
            await self._until_ready(server, entry, timeout)
        return entry.tools

    @staticmethod
    async def _until_ready(server: str, entry: _Server, timeout: float | None) -> None:
        limit = entry.config.startup_timeout_sec if timeout is None else timeout
        try:
            async with asyncio.timeout(limit):
                while entry.status != "ready":
                    if entry.status in ("failed", "disabled", "closed"):
                        raise McpError(f"MCP server {server!r} is {entry.status}: {entry.reason}")
                    await entry.changed.wait()
        except TimeoutError:
            raise McpError(
                f"MCP server {server!r} is not ready after {limit:g}s ({entry.status})"
            ) from None

    # --- calls -------------------------------------------------------------------------------

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        timeout: float | None = None,
        *,
        call_id: str = "",
    ) -> CallResult:
        """Call ``tool`` (the server's own name) of ``server``; failures are results, not raised.

        A server that is starting or restarting is waited for up to its startup timeout.
        ``call_id`` (the model's) is not sent: replay answers calls by it.
        """
        entry = self._servers.get(server)
        if entry is None:
            return CallResult(f"no MCP server named {server!r}", "error")
        try:
            await self.wait_ready(server)
        except McpError as exc:
            return CallResult(str(exc), "error")
        conn = entry.conn
        assert conn is not None
        return await conn.call(tool, arguments, timeout)

    def _get(self, server: str) -> _Server:
        try:
            return self._servers[server]
        except KeyError:
            known = ", ".join(sorted(self._servers)) or "none"
            raise McpError(f"no MCP server named {server!r} (configured: {known})") from None
