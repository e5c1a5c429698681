# The actors wing: Session, Conversation, Scheduler and McpPool actors, the model client, tools.
# It imports `plait.events` (and `plait.errors`, `plait.jsonvalue`), never a wing above it.
"""A session as pykka actors that share no state: they append events, then fold them."""

from plait.faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.actors.actor import Actor
    from plait.actors.approvals import (
        DEFAULT_APPROVAL_TIMEOUT_SEC,
        ApprovalDecision,
        ApprovalGate,
        ApprovalRequest,
        Approver,
    )
    from plait.actors.bridge import Promise
    from plait.actors.builtins import (
        BUILTIN_NAMES,
        ConvCreate,
        ConvSend,
        canonical_name,
        input_items,
        parse_arguments,
    )
    from plait.actors.deps import ConversationDeps
    from plait.actors.effects import EffectLoop
    from plait.actors.feed import DEFAULT_FEED_LIMIT, Feed, Kinds
    from plait.actors.journal import Journal
    from plait.actors.mcp.dispatch import McpLimits
    from plait.actors.messages import (
        AwaitServers,
        CallTool,
        Destroy,
        Enqueue,
        GetHistory,
        GetQueue,
        Interrupt,
        ListConversations,
        ServersSettled,
        StartNext,
        Stop,
        ToolFinished,
        ToolResult,
    )
    from plait.actors.model import ModelClient
    from plait.actors.model_types import AttemptFailed, ModelRequest, ModelSettings
    from plait.actors.outside import IdFor, NewId, ReadInstructions, read_instruction_file
    from plait.actors.pool import McpPool, offer_servers
    from plait.actors.refs import Recipient
    from plait.actors.seams import (
        ApprovalGateLike,
        JournalLike,
        McpPoolRef,
        McpServersLike,
        ModelClientLike,
        ServersFactory,
    )
    from plait.actors.session import Session
    from plait.actors.stream import ModelReply
    from plait.actors.text import lone_surrogate, undecodable

__all__ = [
    "BUILTIN_NAMES",
    "DEFAULT_APPROVAL_TIMEOUT_SEC",
    "DEFAULT_FEED_LIMIT",
    "Actor",
    "ApprovalDecision",
    "ApprovalGate",
    "ApprovalGateLike",
    "ApprovalRequest",
    "Approver",
    "AttemptFailed",
    "AwaitServers",
    "CallTool",
    "ConvCreate",
    "ConvSend",
    "ConversationDeps",
    "Destroy",
    "EffectLoop",
    "Enqueue",
    "Feed",
    "GetHistory",
    "GetQueue",
    "IdFor",
    "Interrupt",
    "Journal",
    "JournalLike",
    "Kinds",
    "ListConversations",
    "McpLimits",
    "McpPool",
    "McpPoolRef",
    "McpServersLike",
    "ModelClient",
    "ModelClientLike",
    "ModelReply",
    "ModelRequest",
    "ModelSettings",
    "NewId",
    "Promise",
    "ReadInstructions",
    "Recipient",
    "ServersFactory",
    "ServersSettled",
    "Session",
    "StartNext",
    "Stop",
    "ToolFinished",
    "ToolResult",
    "canonical_name",
    "input_items",
    "lone_surrogate",
    "offer_servers",
    "parse_arguments",
    "read_instruction_file",
    "undecodable",
]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.actors.actor": ("Actor",),
    "plait.actors.approvals": (
        "DEFAULT_APPROVAL_TIMEOUT_SEC",
        "ApprovalDecision",
        "ApprovalGate",
        "ApprovalRequest",
        "Approver",
    ),
    "plait.actors.bridge": ("Promise",),
    "plait.actors.builtins": (
        "BUILTIN_NAMES",
        "ConvCreate",
        "ConvSend",
        "canonical_name",
        "input_items",
        "parse_arguments",
    ),
    "plait.actors.deps": ("ConversationDeps",),
    "plait.actors.effects": ("EffectLoop",),
    "plait.actors.feed": ("DEFAULT_FEED_LIMIT", "Feed", "Kinds"),
    "plait.actors.journal": ("Journal",),
    "plait.actors.mcp.dispatch": ("McpLimits",),
    "plait.actors.messages": (
        "AwaitServers",
        "CallTool",
        "Destroy",
        "Enqueue",
        "GetHistory",
        "GetQueue",
        "Interrupt",
        "ListConversations",
        "ServersSettled",
        "StartNext",
        "Stop",
        "ToolFinished",
        "ToolResult",
    ),
    "plait.actors.model": ("ModelClient",),
    "plait.actors.model_types": ("AttemptFailed", "ModelRequest", "ModelSettings"),
    "plait.actors.outside": ("IdFor", "NewId", "ReadInstructions", "read_instruction_file"),
    "plait.actors.pool": ("McpPool", "offer_servers"),
    "plait.actors.refs": ("Recipient",),
    "plait.actors.seams": (
        "ApprovalGateLike",
        "JournalLike",
        "McpPoolRef",
        "McpServersLike",
        "ModelClientLike",
        "ServersFactory",
    ),
    "plait.actors.session": ("Session",),
    "plait.actors.stream": ("ModelReply",),
    "plait.actors.text": ("lone_surrogate", "undecodable"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
