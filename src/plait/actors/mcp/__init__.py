# The MCP part of the actors wing: server configs, tool names and lists, connections, servers.
# `config`, `names`, `calls` and `servers` import no `mcp`; `client`, `stdio` and `streamable`
# do (or its HTTP client), and are loaded only when a server starts, so a session without MCP
# servers never imports `mcp`. `servers` (and with it asyncio) loads on first use too: every
# command reads its MCP servers' config through this package, and most run none.
"""MCP servers for plait sessions: configs, fully-qualified tool names, connections."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.actors.mcp.calls import CallResult, Outcome
from plait.actors.mcp.config import McpServerConfig, parse_servers
from plait.actors.mcp.names import (
    Conflict,
    canonical_sha256,
    merge,
    normalize_allowlist,
    openai_spec,
    qualify,
    server_of,
    snapshot,
    tool_list_hash,
)

if TYPE_CHECKING:
    from plait.actors.mcp.client import McpConnection
    from plait.actors.mcp.servers import Backoff, McpServers, Report, SharedServers, Status

__all__ = [
    "Backoff",
    "CallResult",
    "Conflict",
    "McpConnection",
    "McpServerConfig",
    "McpServers",
    "Outcome",
    "Report",
    "SharedServers",
    "Status",
    "canonical_sha256",
    "merge",
    "normalize_allowlist",
    "openai_spec",
    "parse_servers",
    "qualify",
    "server_of",
    "snapshot",
    "tool_list_hash",
]


_SERVERS = frozenset({"Backoff", "McpServers", "Report", "SharedServers", "Status"})


def __getattr__(name: str) -> object:
    # `McpConnection` lives beside the `mcp` import, `servers` beside asyncio's (~12 ms of a
    # command's start): load them on first use only.
    if name == "McpConnection":
        from plait.actors.mcp.client import McpConnection

        return McpConnection
    if name in _SERVERS:
        from plait.actors.mcp import servers

        return getattr(servers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
