"""A real MCP server for plait's tests, written with the SDK's ``MCPServer``.

Run it as ``python tests/mcp/server.py [stdio | http --port N] [--name X] [--variant a|b]``;
over HTTP it prints ``listening on <url>`` once it accepts connections, and with
``--bearer-env VAR`` it answers 401 to a request without ``Authorization: Bearer $VAR``.
It lists its tools three to a page, so a client must follow ``next_cursor``. Tools:

- ``echo``, ``add``, ``pick``, ``slow``, ``huge``, ``image``, ``lookup``, ``served`` (how many
  calls it ran), ``header`` (an HTTP request header): read-only;
- ``note`` (writes, idempotent), ``fail`` (returns an error result), ``crash`` (the process
  exits with code 3 after a line on stderr), ``grow`` (adds the tool ``extra`` and sends
  ``notifications/tools/list_changed``);
- ``bump`` (not idempotent), only when the environment variable ``PLAIT_TEST_COUNTER`` names a
  file: it appends a line to that file and returns how many lines it has, so a test counts the
  executions across processes, even those of a server killed mid-call.

``--variant b`` gives ``lookup`` a different input schema, for conflict tests; ``--variant
control`` adds ``replan``, whose result asks (``_meta["plait/context"]``) for a change of the
caller's context: its arguments, as given.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import sys
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    ToolAnnotations,
)

PAGE = 3
"""Tools per ``tools/list`` page."""

PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""The smallest PNG: one transparent pixel."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
COUNTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)

COUNTER = "PLAIT_TEST_COUNTER"
"""The environment variable naming ``bump``'s counter file; unset, there is no ``bump``."""


class PagedServer(MCPServer):
    """An ``MCPServer`` that lists its tools ``PAGE`` at a time and counts the calls it serves."""

    served = 0
    """Tool calls run so far, not counting ``served`` itself."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        if name != "served":
            self.served += 1
        return await super().call_tool(name, arguments, context)

    async def _handle_list_tools(  # type: ignore[override]
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE
        return ListToolsResult(
            tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None
        )


def build(name: str, variant: str) -> PagedServer:
    """Return the server with every tool registered."""
    server = PagedServer(name, log_level="WARNING")
    notes: dict[str, str] = {}

    @server.tool(annotations=READ_ONLY)
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(annotations=READ_ONLY)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(annotations=READ_ONLY)
    def pick(color: Literal["red", "green"], count: int) -> str:
        """Pick ``count`` things of a colour."""
        return f"{count} {color}"

    @server.tool(annotations=READ_ONLY)
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return f"slept {seconds}s"

    gathering: dict[str, Any] = {"running": 0, "met": anyio.Event()}

    @server.tool(annotations=READ_ONLY)
    async def rendezvous(count: int, within: float = 10.0) -> str:
        """Wait until ``count`` calls of this tool run at once: ``met``, else ``alone``.

        Proof of concurrency without timing: calls sent one after the other never meet.
        """
        met: anyio.Event = gathering["met"]
        gathering["running"] += 1
        try:
            if gathering["running"] >= count:
                met.set()
            with anyio.move_on_after(within):
                await met.wait()
            return "met" if met.is_set() else "alone"
        finally:
            gathering["running"] -= 1
            if gathering["running"] == 0 and met.is_set():
                gathering["met"] = anyio.Event()  # the next group meets afresh

    @server.tool(annotations=READ_ONLY)
    def huge(size: int = 1_000_000) -> str:
        """Return ``size`` characters."""
        return "x" * size

    @server.tool(annotations=READ_ONLY)
    def image() -> Image:
        """Return a one-pixel PNG."""
        return Image(data=PNG_1X1, format="png")

    @server.tool(annotations=READ_ONLY)
    def served() -> int:
        """Return how many tool calls this server has run (not counting this one)."""
        return server.served

    @server.tool(annotations=READ_ONLY)
    def header(name: str, ctx: Context) -> str:
        """Return an HTTP request header ("" over stdio)."""
        return (ctx.headers or {}).get(name.lower(), "")

    if variant == "control":

        @server.tool(annotations=READ_ONLY)
        def replan(change: dict[str, Any]) -> CallToolResult:
            """Ask for a change of the calling conversation's context."""
            text = TextContent(type="text", text="replanned")
            return CallToolResult(content=[text], meta={"plait/context": change})

    if variant == "b":

        @server.tool(annotations=READ_ONLY)
        def lookup(key: str, exact: bool) -> str:
            """Look a key up (variant b: an extra argument)."""
            return f"b:{key}:{exact}"

    else:

        @server.tool(annotations=READ_ONLY)
        def lookup(key: str) -> str:
            """Look a key up."""
            return f"a:{key}"

    @server.tool(annotations=WRITES)
    def note(key: str, text: str) -> str:
        """Remember a note."""
        notes[key] = text
        return f"noted {key}"

    @server.tool()
    def fail(message: str) -> str:
        """Fail with the message."""
        raise ToolError(message)

    @server.tool()
    def crash() -> str:
        """Exit the whole process with code 3."""
        sys.stderr.write("crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool ``extra`` and tell the client its tool list changed."""

        def extra() -> str:
            """A tool that appeared later."""
            return "extra"

        server.add_tool(extra, annotations=READ_ONLY)
        await ctx.session.send_tool_list_changed()
        return "grown"

    counter = os.environ.get(COUNTER)
    if counter:  # only then: the default tool list stays what the other tests expect

        @server.tool(annotations=COUNTS)
        async def bump(hold: float = 0.0) -> int:
            """Count one execution, then wait ``hold`` seconds; return the executions so far."""
            with open(counter, "a") as file:
                file.write("bump\n")
            with open(counter) as file:
                count = sum(1 for _ in file)
            await anyio.sleep(hold)
            return count

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"], nargs="?", default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="plait-test")
    parser.add_argument("--variant", choices=["a", "b", "control"], default="a")
    parser.add_argument("--bearer-env", metavar="VAR", help="over HTTP: require this token")
    args = parser.parse_args()
    server = build(args.name, args.variant)
    if args.transport == "http":
        token = os.environ[args.bearer_env] if args.bearer_env else None
        anyio.run(serve_http, server, args.port, token)
    else:
        server.run("stdio")


async def serve_http(server: MCPServer, port: int, token: str | None = None) -> None:
    """Serve streamable HTTP on loopback; print the URL once the socket listens; with
    ``token``, refuse (401) every request that does not carry it as a bearer token.

    The socket is bound (``--port 0``: any free port) and listening before the line is
    printed, so a client that reads it can connect at once: no polling, no sleeping.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    app: Any = server.streamable_http_app(host="127.0.0.1")
    if token is not None:
        app = _bearer_only(app, token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def _bearer_only(app: Any, token: str) -> Any:
    """Wrap an ASGI app: an HTTP request without ``Authorization: Bearer <token>`` gets 401."""
    wanted = f"Bearer {token}".encode()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != wanted:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no bearer token"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    main()
