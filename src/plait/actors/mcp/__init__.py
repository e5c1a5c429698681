# Part of the actors wing: MCP server configs, tool names and lists, connections, servers.
# It imports `plait.events` and the actors' seams and messages, never the pool that runs it.
"""MCP servers for plait sessions: configs, fully-qualified tool names, connections.

``config``, ``names`` and ``calls`` import no ``mcp``; ``client``, ``stdio`` and ``streamable``
do (or its HTTP client), and load only when a server starts, so a session without MCP servers
never imports ``mcp``. Every command reads its MCP servers' config through this package, and
most run none: each name here loads on its first use, ``servers`` (and with it asyncio) too.
"""

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.actors.mcp._calls import CallResult, Outcome
    from plait.actors.mcp._client import McpConnection
    from plait.actors.mcp._config import McpServerConfig, check_keys, expand, parse_servers
    from plait.actors.mcp._dispatch import Dispatcher, McpLimits
    from plait.actors.mcp._functions import (
        FUNCTIONS,
        FUNCTIONS_CONFIG,
        FunctionTool,
        as_tools,
        tool,
    )
    from plait.actors.mcp._names import (
        SEPARATOR,
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
    from plait.actors.mcp._server import Backoff, Report, Status
    from plait.actors.mcp._servers import McpServers
    from plait.actors.mcp._shared import SharedServers

__all__ = [
    "FUNCTIONS",
    "FUNCTIONS_CONFIG",
    "SEPARATOR",
    "Backoff",
    "CallResult",
    "Conflict",
    "Dispatcher",
    "FunctionTool",
    "McpConnection",
    "McpLimits",
    "McpServerConfig",
    "McpServers",
    "Outcome",
    "Report",
    "SharedServers",
    "Status",
    "as_tools",
    "canonical_sha256",
    "check_keys",
    "expand",
    "merge",
    "normalize_allowlist",
    "openai_spec",
    "parse_servers",
    "qualify",
    "server_of",
    "snapshot",
    "tool",
    "tool_list_hash",
]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.actors.mcp._calls": ("CallResult", "Outcome"),
    "plait.actors.mcp._client": ("McpConnection",),
    "plait.actors.mcp._config": ("McpServerConfig", "check_keys", "expand", "parse_servers"),
    "plait.actors.mcp._dispatch": ("Dispatcher", "McpLimits"),
    "plait.actors.mcp._functions": (
        "FUNCTIONS",
        "FUNCTIONS_CONFIG",
        "FunctionTool",
        "as_tools",
        "tool",
    ),
    "plait.actors.mcp._names": (
        "SEPARATOR",
        "Conflict",
        "canonical_sha256",
        "merge",
        "normalize_allowlist",
        "openai_spec",
        "qualify",
        "server_of",
        "snapshot",
        "tool_list_hash",
    ),
    "plait.actors.mcp._server": ("Backoff", "Report", "Status"),
    "plait.actors.mcp._servers": ("McpServers",),
    "plait.actors.mcp._shared": ("SharedServers",),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
