# The actors wing: Session, Conversation, Scheduler and McpPool actors, the model client, tools.
# It imports `plait.events` (and `plait.errors`), never `plait.replay`.
"""The runtime (arrives with the runtime issue)."""

__all__: list[str] = []
