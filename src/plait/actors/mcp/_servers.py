"""``McpServers``: a session's MCP servers, as the session sees them.

Every method runs on the effect loop (submit the coroutines with ``EffectLoop.submit``). Each
configured server is a ``Server``: the runtime's shared one (``SharedServers``), or one of the
session's own where its config says ``scope = "session"``, where there is no runtime to share
with, and for the session's function tools (the server ``FUNCTIONS``). The session listens to
each: what happens to it (``McpServerReady``, ``McpServerFailed``, ``McpToolsRefreshed``) is
reported through one callback, on the loop thread, in order, so the caller can record it.

``start`` starts the servers the session has no recorded tool list for; the others (``lazy``)
start at their first call (docs/tools.md#started-when-needed), and until then the session offers
the tools its log last recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from plait._errors import McpError
from plait._jsonvalue import JsonValue
from plait.actors.mcp._calls import CallResult
from plait.actors.mcp._config import McpServerConfig
from plait.actors.mcp._functions import FUNCTIONS, FunctionConnection, FunctionTool
from plait.actors.mcp._server import Backoff, Report, Server, Status
from plait.actors.mcp._shared import SharedServers
from plait.events import McpToolSnapshot

if TYPE_CHECKING:  # client.py imports mcp: loaded when the first server starts, not before
    from plait.actors.mcp._client import McpConnection

__all__ = ["Backoff", "McpServers", "Report", "SharedServers", "Status"]

_CLOSED = "the session closed it"


class McpServers:
    """The MCP servers of one session, by configured name."""

    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        report: Report,
        *,
        backoff: Backoff | None = None,
        functions: Sequence[FunctionTool] = (),
        shared: SharedServers | None = None,
    ) -> None:
        """Prepare (without starting) every configured server. ``functions`` are served as the
        server ``FUNCTIONS`` (which ``configs`` names); ``shared``: the runtime's servers,
        used for every server not configured with ``scope = "session"``."""
        self._report = report
        self._own: dict[str, Server] = {}
        self._servers: dict[str, Server] = {}
        for name, config in configs.items():
            if shared is not None and config.scope == "process" and name != FUNCTIONS:
                self._servers[name] = shared.server(name, config)
            else:
                own = Server(name, config, backoff=backoff, functions=functions)
                self._servers[name] = self._own[name] = own
        self._closed = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, lazy: Collection[str] = ()) -> None:
        """Listen to every server and start those not in ``lazy`` (in the background: return
        at once); a server of ``lazy`` starts when a call or a wait first needs it."""
        if self._closed:
            raise McpError("MCP servers are closed")
        for name, server in self._servers.items():
            if name not in lazy:
                server.start()
            server.listen(self._report)

    async def close(self) -> None:
        """Stop listening, and stop the session's own servers. Idempotent."""
        self._closed = True
        for server in self._servers.values():
            server.leave(self._report)
        await asyncio.gather(*(server.close(_CLOSED) for server in self._own.values()))

    # --- queries -----------------------------------------------------------------------------

    def status(self, server: str) -> Status:
        """Return where ``server`` is in its life; ``McpError`` if it is not configured."""
        return "closed" if self._closed else self._get(server).status

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
        """Wait until ``server`` is ready (starting it if it never ran) and return its tools.

        ``timeout`` defaults to its ``startup_timeout_sec``. Raises ``McpError`` if it is not
        configured, disabled, failed for good, closed, or still not ready in time.
        """
        entry = self._get(server)
        if self._closed:
            raise McpError(f"MCP server {server!r} is closed: {_CLOSED}")
        return await entry.wait_ready(timeout)

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

        A server that never ran is started; one starting or restarting is waited for up to its
        startup timeout. ``call_id`` (the model's) is not sent: replay answers calls by it.
        """
        entry = self._servers.get(server)
        if entry is None:
            return CallResult(f"no MCP server named {server!r}", "error")
        if self._closed:
            return CallResult(f"MCP server {server!r} is closed: {_CLOSED}", "error")
        return await entry.call(tool, arguments, timeout)

    def _get(self, server: str) -> Server:
        try:
            return self._servers[server]
        except KeyError:
            known = ", ".join(sorted(self._servers)) or "none"
            raise McpError(f"no MCP server named {server!r} (configured: {known})") from None
