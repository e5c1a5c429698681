"""``McpConnection``: one live connection to one MCP server, on the effect loop (asyncio).

The connection owns a runner task that holds the transport and the ``ClientSession`` open
(anyio requires one task to enter and leave them); calls are made from any task on the same
loop. ``start`` spawns or connects, runs ``initialize`` and lists every page of tools;
``call`` checks the arguments, calls, and converts the result; ``close`` leaves nothing
running. Failures come back as ``McpError`` (start) or ``CallResult`` (calls), in words a
person understands. This module (with ``_stdio.py``) is the only one that imports ``mcp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import anyio
import mcp_types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from plait._errors import McpError
from plait._jsonvalue import JsonValue
from plait.actors.mcp import _names as names
from plait.actors.mcp._calls import CallResult, decode_arguments, from_mcp_result, schema_problem
from plait.actors.mcp._config import McpServerConfig, http_headers
from plait.actors.mcp._stdio import ChildProcess, stdio_transport
from plait.actors.mcp._streamable import mend_replies
from plait.events import McpToolSnapshot

__all__ = ["McpConnection"]

log = logging.getLogger("plait.mcp")

MAX_PAGES: Final = 1000
"""A ``tools/list`` that pages longer than this is taken as a server bug."""
MAX_SSE_EVENT: Final = 64 * 1024 * 1024
"""Largest streamable-HTTP message accepted (the SDK's default, 1 MiB, is too small)."""
DEATH_GRACE_SEC: Final = 5.0
"""How long a failed call waits to learn how the server died, for its message."""

_CLOSED_DURING_INIT: Final = "connection closed during initialize"
_HTTP_CLOSED: Final = "closed the connection"
_UNPARSED: Final = "Failed to parse "
"""How the SDK's streamable-HTTP transport begins the error for a reply it cannot read."""
_INVALID_JSON: Final = re.compile(r"Invalid JSON: (.+?)(?: \[type=|$)", re.MULTILINE)

ToolsChanged = Callable[[list[McpToolSnapshot]], None]


class McpConnection:
    """A connection to the MCP server ``server`` configured by ``config``."""

    def __init__(
        self, server: str, config: McpServerConfig, *, on_tools_changed: ToolsChanged | None = None
    ) -> None:
        """Prepare the connection; nothing starts before :meth:`start`.

        ``on_tools_changed`` is called on the loop with the new tool list each time the
        server sends ``tools/list_changed`` and has been listed again.
        """
        self.server = server
        """The configured server name."""
        self.config = config
        """Its configuration."""
        self._on_tools_changed = on_tools_changed
        self._tools: dict[str, McpToolSnapshot] = {}
        self._session: ClientSession | None = None
        self._child: ChildProcess | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[list[McpToolSnapshot]] | None = None
        self._startup: anyio.CancelScope | None = None
        self._wake = asyncio.Event()
        self._done = asyncio.Event()
        self._closing = False
        self._ended: str | None = None
        self._refused: int | None = None  # an HTTP server's 401 or 403, which the SDK hides
        self._relist = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()

    # --- state -------------------------------------------------------------------------------

    @property
    def tools(self) -> list[McpToolSnapshot]:
        """The tools offered, in name order, as last listed."""
        return sorted(self._tools.values(), key=lambda t: t.name)

    @property
    def pid(self) -> int | None:
        """The server process's pid (stdio servers only)."""
        return self._child.pid if self._child is not None else None

    @property
    def alive(self) -> bool:
        """Whether calls can be sent: started, not closed, not dead."""
        return self._session is not None and not self._wake.is_set()

    def stderr_tail(self) -> str:
        """The last lines the server wrote to stderr (stdio servers only)."""
        return self._child.stderr_tail() if self._child is not None else ""

    async def wait_closed(self) -> str | None:
        """Wait until the connection ends; return how the server died, ``None`` if closed."""
        await self._done.wait()
        return None if self._closing else self._ended

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> list[McpToolSnapshot]:
        """Connect, ``initialize`` and list every tool, within ``startup_timeout_sec``.

        Raises ``McpError`` saying why it could not (``command not found: X``, ``exited with
        code N: <stderr tail>``, ``initialize timed out after Ns``).
        """
        if self._runner is not None:
            raise McpError(f"MCP server {self.server!r}: already started")
        self._ready = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(self._ready), name=f"mcp:{self.server}")
        try:
            return await asyncio.shield(self._ready)
        except asyncio.CancelledError:
            self._closing = True
            self._wake.set()
            self._cut_start()
            raise

    async def close(self) -> None:
        """Stop the server (or end the HTTP session) and wait until nothing is left. Idempotent."""
        self._closing = True
        self._wake.set()
        if self._ready is not None and not self._ready.done():
            self._cut_start()
        for task in list(self._background):
            task.cancel()
        if self._runner is not None:
            await asyncio.shield(self._runner)

    def _cut_start(self) -> None:
        """End a start under way: no more of ``initialize``, and no wait for a server that
        never started to exit by itself (a stop waits for none, docs/processes.md#stopping).
        The runner checks ``_closing`` as it reaches ``initialize``, for a close before."""
        if self._startup is not None:
            self._startup.cancel()
        if self._child is not None:
            self._child.exit_grace_sec = 0.0

    async def _run(self, ready: asyncio.Future[list[McpToolSnapshot]]) -> None:
        timeout = self.config.startup_timeout_sec
        failure: str | None = None
        try:
            if self._closing:  # closed before it began: nothing is spawned
                return
            async with (
                self._transport() as (read, write),
                ClientSession(read, write, message_handler=self._on_message) as session,
            ):
                tools: list[McpToolSnapshot] | None = None
                with anyio.move_on_after(timeout) as self._startup:
                    if self._closing:  # closed as it spawned: ``close`` found no start to cut
                        self._cut_start()
                    try:
                        await session.initialize()
                        tools = await self._list(session)
                    except Exception as exc:  # the server died or answered nonsense
                        failure = self._start_failure(exc)
                self._startup = None
                if failure is None and tools is None and not self._closing:
                    failure = f"initialize timed out after {timeout:g}s"
                if failure is not None and failure != _CLOSED_DURING_INIT:
                    # Say so now; stopping the server may take seconds more.
                    ready.set_exception(
                        McpError(f"MCP server {self.server!r}: {self._why(failure)}")
                    )
                if tools is not None and not self._wake.is_set():
                    self._tools = {t.tool: t for t in tools}
                    self._session = session
                    ready.set_result(self.tools)
                    await self._wake.wait()
                self._session = None
        except McpError as exc:  # raised before there was a session (spawn)
            failure = str(exc)
        except Exception as exc:
            log.debug("MCP server %r: connection ended", self.server, exc_info=True)
            failure = failure or f"connection failed: {_describe(exc)}"
        finally:
            self._session = None
            self._ended = self._child.exit_description() if self._child else _HTTP_CLOSED
            if not ready.done():
                ready.set_exception(McpError(f"MCP server {self.server!r}: {self._why(failure)}"))
            self._done.set()

    def _why(self, failure: str | None) -> str:
        """Say why a start failed: the child's exit says most, when it has exited."""
        if self._closing:
            return "closed while starting"
        if failure is None or failure == _CLOSED_DURING_INIT:
            return self._ended or _HTTP_CLOSED
        tail = self.stderr_tail()
        return f"{failure}; stderr: {tail}" if tail else failure

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:  # the SDK names its streams privately
        """Yield the session's read and write streams for the configured transport."""
        config = self.config
        if config.command is not None:
            passed = {var: os.environ[var] for var in config.env_vars if var in os.environ}
            async with stdio_transport(
                config.command, config.args, passed | config.env, config.cwd, self._wake.set
            ) as (streams, child):
                self._child = child
                yield streams
        else:
            import httpx2

            assert config.url is not None
            # Read when it connects: secrets come from the environment and go nowhere else.
            headers = http_headers(config)

            async def seen(response: httpx2.Response) -> None:
                if response.status_code in (401, 403):
                    self._refused = response.status_code

            client = httpx2.AsyncClient(
                headers=headers or None,
                timeout=httpx2.Timeout(30.0, read=300.0),
                event_hooks={"response": [seen, mend_replies]},
            )
            async with (
                client,
                streamable_http_client(
                    config.url, http_client=client, max_sse_event_size=MAX_SSE_EVENT
                ) as http_streams,
            ):
                yield http_streams

    def _start_failure(self, exc: Exception) -> str:
        if self._refused is not None:
            return (
                f"initialize failed: the server answered HTTP {self._refused} (are its headers "
                "right? http_headers, env_http_headers, bearer_token_env_var)"
            )
        if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
            return _CLOSED_DURING_INIT  # the child's exit says more
        return f"initialize failed: {_describe(exc)}"

    async def _list(self, session: ClientSession) -> list[McpToolSnapshot]:
        """List every page of tools; return the offered ones as snapshots."""
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
            if cursor in seen:
                raise McpError(f"tools/list repeated the cursor {cursor!r}")
            seen.add(cursor)
        else:
            raise McpError(f"tools/list went on for more than {MAX_PAGES} pages")
        snapshots = (self._snapshot(tool) for tool in listed)
        return sorted((s for s in snapshots if s is not None), key=lambda s: s.name)

    def _snapshot(self, tool: mcp_types.Tool) -> McpToolSnapshot | None:
        annotations = (
            tool.annotations.model_dump(by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else None
        )
        return names.snapshot(
            self.server,
            tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            annotations=annotations,
            config=self.config,
        )

    # --- tools/list_changed ------------------------------------------------------------------

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            # Not inline: the session's reader delivers this and must be free to read the
            # answer to our tools/list.
            task = asyncio.create_task(self._refresh(), name=f"mcp:{self.server}:relist")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        elif isinstance(message, Exception):
            log.debug("MCP server %r: transport error: %s", self.server, message)

    async def _refresh(self) -> None:
        async with self._relist:  # one at a time, so the last listing is the newest
            session = self._session
            if session is None or not self.alive:
                return
            try:
                tools = await self._list(session)
            except Exception as exc:
                log.warning("MCP server %r: re-listing tools failed: %s", self.server, exc)
                return
            self._tools = {t.tool: t for t in tools}
            if self._on_tools_changed is not None:
                self._on_tools_changed(self.tools)

    # --- calls -------------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: str | Mapping[str, JsonValue], timeout: float | None = None
    ) -> CallResult:
        """Call ``tool`` (the server's own name); never raises for a failure of the call.

        ``arguments`` is a JSON object, as text (the model's) or decoded. They are checked
        against the tool's input schema first: a problem is an ``error`` result and the
        server is not called. After ``timeout`` seconds (default ``tool_timeout_sec``) the
        server is asked to cancel and the result is a ``timeout``.
        """
        snap = self._tools.get(tool)
        if snap is None:
            return CallResult(f"MCP server {self.server!r} offers no tool {tool!r}", "error")
        args = decode_arguments(snap.name, arguments)
        if isinstance(args, str):
            return CallResult(args, "error")
        problem = schema_problem(snap.name, snap.input_schema, args)
        if problem is not None:
            return CallResult(problem, "error")
        session = self._session
        if session is None or not self.alive:
            return CallResult(await self._not_running(), "error")
        limit = timeout if timeout is not None else self.config.tool_timeout_sec
        started = time.perf_counter()
        try:
            result = await session.call_tool(tool, args, read_timeout_seconds=limit)
        except MCPError as exc:
            ms = (time.perf_counter() - started) * 1000
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                message = (
                    f"{snap.name} timed out after {limit:g}s; the server was asked to cancel it"
                )
                return CallResult(message, "timeout", duration_ms=round(ms, 3))
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._wake.set()  # the connection is gone: let it end, and be restarted
                return CallResult(await self._not_running(), "error", duration_ms=round(ms, 3))
            if exc.code == mcp_types.PARSE_ERROR and exc.message.startswith(_UNPARSED):
                message = f"{snap.name} failed: {self._unreadable(exc.message)}"
            else:
                message = f"{snap.name} failed: {exc.message} (MCP error {exc.code})"
            return CallResult(message, "error", duration_ms=round(ms, 3))
        except Exception as exc:  # a malformed result, a transport failure
            ms = (time.perf_counter() - started) * 1000
            return CallResult(
                f"{snap.name} failed: {_describe(exc)}", "error", duration_ms=round(ms, 3)
            )
        ms = (time.perf_counter() - started) * 1000
        return from_mcp_result(
            result.content, result.structured_content, result.is_error, ms, result.meta
        )

    def _unreadable(self, report: str) -> str:
        """Say that the server's reply is not JSON-RPC, even mended (over streamable HTTP, or
        a stdio line that names its call).

        ``report`` is the SDK's, pydantic's words with the input echoed: only the reason
        JSON gives is kept.
        """
        found = _INVALID_JSON.search(report)
        what = f"is not JSON ({found.group(1)})" if found else "is not a JSON-RPC message"
        return f"MCP server {self.server!r} sent a reply that {what}"

    async def _not_running(self) -> str:
        """Say why calls cannot be made, waiting briefly to learn how the server died."""
        if self._closing:
            return f"MCP server {self.server!r} is closed"
        if self._runner is None:
            return f"MCP server {self.server!r} is not started"
        with anyio.move_on_after(DEATH_GRACE_SEC):
            await self._done.wait()
        return f"MCP server {self.server!r} {self._ended or _HTTP_CLOSED}"


def _describe(exc: BaseException) -> str:
    """Say what an exception means in one line (the innermost of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, McpError | MCPError) else f"{type(exc).__name__}: {text}"
