"""The demo's tiny MCP server: ``python -m plait.cli._demo_tools`` serves it over stdio.

One read-only tool, ``pending_changes``, answers what a release would ship, from a fixed
list: the demo needs a real MCP server and no network.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

__all__ = ["CHANGES", "build"]

CHANGES = (
    "storage policies: full, headers_only, none, ttl",
    "crash recovery runs read-only calls again",
    "the event reference is generated from the types",
)
"""What the demo's release would ship."""


def build() -> MCPServer:
    """Return the server with its tool registered."""
    server = MCPServer("release", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def pending_changes() -> str:
        """List the changes waiting for the next release, one per line."""
        return "\n".join(f"- {change}" for change in CHANGES)

    return server


if __name__ == "__main__":
    build().run("stdio")
