# The actors wing: Session, Conversation, Scheduler and McpPool actors, the model client, tools.
# It imports `plait.events` (and `plait.errors`), never `plait.runtime`, `plait.replay` or the cli.
"""A session as pykka actors that share no state: they append events, then fold them."""

__all__: list[str] = []
