"""What answers a session's effects in place of the world, when replay runs it: the model,
the MCP servers, the approver and the ids, from the log (docs/replay.md)."""

from __future__ import annotations

import dataclasses

from plait.actors import ApprovalGateLike, ModelClientLike, NewId, ReadInstructions, ServersFactory

__all__ = ["Outside"]


@dataclasses.dataclass(frozen=True)
class Outside:
    """What answers a session's effects in place of the world: replay's answers from the log
    (``None``: the real model client, MCP servers and approver)."""

    model_client: ModelClientLike | None = None
    """Answers model requests, as ``ModelClient`` does."""
    mcp_factory: ServersFactory | None = None
    """Makes a session's MCP servers from their configs, as ``McpServers`` does."""
    approval_gate: ApprovalGateLike | None = None
    """Decides approvals, as ``ApprovalGate`` does."""
    new_id: NewId | None = None
    """Makes the ids of what tool calls make (``None``: the runtime's ``new_id``)."""
    read_instructions: ReadInstructions | None = None
    """Reads ``conv_create``'s instruction files (``None``: from the working directory)."""
    records_servers: bool = True
    """Each run records the MCP servers it offers (``McpServersOffered``); replay's feeds in
    those the log recorded instead."""
