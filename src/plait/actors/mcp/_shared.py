"""``SharedServers``: the MCP servers of a plait process, each shared by the sessions using it.

A server process belongs to the runtime, not to a session (docs/tools.md#shared-servers): every
session whose configuration names a server the same way (its name and its whole config) uses
one ``Server``, started when the first of them needs it and kept until the runtime closes, so a
worker running a hundred sessions runs each configured server once. A server configured with
``scope = "session"`` is not shared (``McpServers`` keeps one of its own per session). Every
method runs on the effect loop.
"""

from __future__ import annotations

import asyncio

import msgspec

from plait.actors.mcp._config import McpServerConfig
from plait.actors.mcp._server import Backoff, Server

__all__ = ["SharedServers"]


class SharedServers:
    """A runtime's shared MCP servers, by name and config."""

    def __init__(self, backoff: Backoff | None = None) -> None:
        self._backoff = backoff
        self._servers: dict[tuple[str, bytes], Server] = {}
        self._closed = False

    def server(self, name: str, config: McpServerConfig) -> Server:
        """The server ``name`` configured by ``config`` (made, not started, on first ask)."""
        key = (name, msgspec.json.encode(config))
        found = self._servers.get(key)
        if found is None:
            found = self._servers[key] = Server(name, config, backoff=self._backoff)
            if self._closed:  # a session that starts as the runtime closes gets none
                found.status, found.reason = "closed", "plait is closing"
        return found

    async def close(self) -> None:
        """Stop every server. Idempotent."""
        self._closed = True
        await asyncio.gather(*(server.close() for server in self._servers.values()))
