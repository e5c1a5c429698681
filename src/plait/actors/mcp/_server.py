"""``Server``: one MCP server, started when first needed, kept running, told to its listeners.

Every method runs on the effect loop. A server is started by ``start`` (a no-op once it runs):
a supervisor task spawns or connects to it, reports what happens, and restarts it with
exponential backoff if it dies after it was ready. What happens is told as event bodies
(``McpServerReady``, ``McpServerFailed``, ``McpToolsRefreshed``) to every listener, on the loop
thread, in order: each session that uses the server records them in its own log. A listener
that joins a server already up is told it is ready at once (or that it failed for good), so
each session's log says what its tools are. A server that cannot start at all is not retried
(a missing command will not appear later) until someone needs it again.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from plait._errors import McpError
from plait._jsonvalue import JsonValue
from plait.actors.mcp._calls import CallResult
from plait.actors.mcp._config import McpServerConfig
from plait.actors.mcp._functions import FUNCTIONS, FunctionConnection, FunctionTool
from plait.events import Body, McpServerFailed, McpServerReady, McpToolSnapshot, McpToolsRefreshed

if TYPE_CHECKING:  # client.py imports mcp: loaded when the first server starts, not before
    from plait.actors.mcp._client import McpConnection

__all__ = ["Backoff", "Report", "Server", "Status"]

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


class Server:
    """One MCP server (or the function tools, as the server ``FUNCTIONS``) and who listens."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        backoff: Backoff | None = None,
        functions: Sequence[FunctionTool] = (),
    ) -> None:
        """Prepare the server (nothing runs until ``start``)."""
        self.name = name
        self.config = config
        self.status: Status = "pending" if config.enabled else "disabled"
        self.reason = "disabled in its config" if not config.enabled else ""
        self.tools: list[McpToolSnapshot] = []
        """Its tools as last listed (kept while it restarts)."""
        self.attempt = 0
        self.conn: McpConnection | FunctionConnection | None = None
        self._functions = functions
        self._backoff = backoff or Backoff()
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._listeners: dict[int, Report] = {}

    # --- listeners ---------------------------------------------------------------------------

    def listen(self, report: Report) -> None:
        """Tell ``report`` what happens from now on; if the server is up (or failed for good),
        tell it so at once."""
        self._listeners[id(report)] = report
        if self.status == "ready":
            _tell(report, McpServerReady(self.name, self.tools, self.attempt))
        elif self.status == "failed":
            _tell(report, McpServerFailed(self.name, self.reason, self.attempt, None))

    def leave(self, report: Report) -> None:
        """Stop telling ``report``."""
        self._listeners.pop(id(report), None)

    @property
    def listened(self) -> bool:
        """Whether anyone listens."""
        return bool(self._listeners)

    def _report(self, body: Body) -> None:
        for report in list(self._listeners.values()):
            _tell(report, body)

    def _set(self, status: Status, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()  # wakes everyone waiting on the state before this one

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server in the background, unless it runs (or is disabled or closed); a
        server that failed for good is tried again: someone needs it now."""
        if self.status in ("pending", "failed"):
            self.attempt = 0
            self._set("starting")
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    async def close(self, reason: str = "plait closed it") -> None:
        """Stop the server and wait until nothing of it runs. Idempotent."""
        if self.status in ("disabled", "closed"):
            return
        self._set("closed", reason)  # first: the supervisor sees it and starts nothing more
        if self.conn is not None:
            await self.conn.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.conn is not None:
            await self.conn.close()  # one the supervisor created while we waited

    @property
    def _closing(self) -> bool:
        return self.status == "closed"

    async def _supervise(self) -> None:
        try:
            await self._keep_running()
        except Exception as exc:  # a bug of ours: say so rather than leave waiters hanging
            log.exception("MCP server %r: supervisor failed", self.name)
            reason = f"plait failed to supervise it: {exc!r}"
            self._report(McpServerFailed(self.name, reason, max(self.attempt, 1), None))
            self._set("failed", reason)

    async def _keep_running(self) -> None:
        if self.name != FUNCTIONS:
            # Importing mcp takes about a second: not on the loop, where model streams run too.
            await asyncio.to_thread(importlib.import_module, "plait.actors.mcp._client")
        failures = 0
        loop = asyncio.get_running_loop()
        while not self._closing:
            self.attempt += 1
            conn = self.conn = self._connect()
            try:
                tools = await conn.start()
            except McpError as exc:
                failures += 1
                reason = str(exc).removeprefix(f"MCP server {self.name!r}: ")
                if not await self._failed(reason, failures, first=self.attempt == 1):
                    return
                continue
            if self._closing:
                return
            up_since = loop.time()
            self.tools = tools
            self._set("ready")
            self._report(McpServerReady(self.name, tools, self.attempt))
            died = await conn.wait_closed()
            if died is None or self._closing:
                return
            if loop.time() - up_since >= self._backoff.stable_sec:
                failures = 0
            failures += 1
            if not await self._failed(died, failures, first=False):
                return

    def _connect(self) -> McpConnection | FunctionConnection:
        if self.name == FUNCTIONS:
            return FunctionConnection(self._functions)
        from plait.actors.mcp._client import McpConnection

        return McpConnection(self.name, self.config, on_tools_changed=self._refreshed)

    async def _failed(self, reason: str, failures: int, *, first: bool) -> bool:
        """Report a failure and wait out the backoff; return whether to start again."""
        if self._closing:
            return False
        retry = None if first or failures >= self._backoff.max_failures else failures
        delay = self._backoff.delay(retry) if retry is not None else None
        self._report(McpServerFailed(self.name, reason, self.attempt, delay))
        if delay is None:
            self._set("failed", reason)
            return False
        self._set("restarting", reason)
        await asyncio.sleep(delay)
        return not self._closing

    def _refreshed(self, tools: list[McpToolSnapshot]) -> None:
        self.tools = tools
        self._report(McpToolsRefreshed(self.name, tools))

    # --- use ---------------------------------------------------------------------------------

    async def wait_ready(self, timeout: float | None = None) -> list[McpToolSnapshot]:
        """Start the server if it never ran, wait until it is ready, return its tools.

        ``timeout`` defaults to its ``startup_timeout_sec``. Raises ``McpError`` if it is
        disabled, failed for good, closed, or still not ready in time.
        """
        if self.status != "ready":  # the usual case, ready, costs no wait (and no timer)
            if self.status == "pending":
                self.start()
            await self._until_ready(self.config.startup_timeout_sec if timeout is None else timeout)
        return self.tools

    async def _until_ready(self, limit: float) -> None:
        try:
            async with asyncio.timeout(limit):
                while self.status != "ready":
                    if self.status in ("failed", "disabled", "closed"):
                        raise McpError(f"MCP server {self.name!r} is {self.status}: {self.reason}")
                    await self._changed.wait()
        except TimeoutError:
            raise McpError(
                f"MCP server {self.name!r} is not ready after {limit:g}s ({self.status})"
            ) from None

    async def call(
        self, tool: str, arguments: str | Mapping[str, JsonValue], timeout: float | None
    ) -> CallResult:
        """Call ``tool`` (the server's own name), starting the server if it never ran, or
        waiting for it up to its startup timeout; failures are results, not raised."""
        try:
            await self.wait_ready()
        except McpError as exc:
            return CallResult(str(exc), "error")
        assert self.conn is not None
        return await self.conn.call(tool, arguments, timeout)


def _tell(report: Report, body: Body) -> None:
    try:
        report(body)
    except Exception:  # the recorder's problem must not stop the servers
        log.exception("reporting %s failed", type(body).__name__)
