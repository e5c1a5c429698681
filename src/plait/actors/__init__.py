# The actors wing: Session, Conversation, Scheduler and McpPool actors, the model client, tools.
# It imports `plait.events` (and `plait._errors`, `plait._jsonvalue`), never a wing above it.
"""A session as pykka actors that share no state: they append events, then fold them."""

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.actors._actor import Actor
    from plait.actors._approvals import (
        DEFAULT_APPROVAL_TIMEOUT_SEC,
        ApprovalDecision,
        ApprovalGate,
        ApprovalRequest,
        Approver,
    )
    from plait.actors._bridge import Promise
    from plait.actors._builtins import (
        BUILTIN_NAMES,
        ConvCreate,
        ConvSend,
        canonical_name,
        input_items,
        parse_arguments,
    )
    from plait.actors._deps import ConversationDeps
    from plait.actors._effects import EffectLoop
    from plait.actors._feed import DEFAULT_FEED_LIMIT, Feed, Kinds
    from plait.actors._journal import Journal
    from plait.actors._messages import (
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
    from plait.actors._model import ModelClient
    from plait.actors._model_types import AttemptFailed, ModelRequest, ModelSettings
    from plait.actors._outside import IdFor, NewId, ReadInstructions, read_instruction_file
    from plait.actors._pool import McpPool, offer_servers
    from plait.actors._refs import Recipient
    from plait.actors._seams import (
        ApprovalGateLike,
        JournalLike,
        McpPoolRef,
        McpServersLike,
        ModelClientLike,
        ServersFactory,
    )
    from plait.actors._session import Session
    from plait.actors._stream import ModelReply
    from plait.actors._text import lone_surrogate, undecodable
    from plait.actors.mcp._dispatch import McpLimits

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
    "plait.actors._actor": ("Actor",),
    "plait.actors._approvals": (
        "DEFAULT_APPROVAL_TIMEOUT_SEC",
        "ApprovalDecision",
        "ApprovalGate",
        "ApprovalRequest",
        "Approver",
    ),
    "plait.actors._bridge": ("Promise",),
    "plait.actors._builtins": (
        "BUILTIN_NAMES",
        "ConvCreate",
        "ConvSend",
        "canonical_name",
        "input_items",
        "parse_arguments",
    ),
    "plait.actors._deps": ("ConversationDeps",),
    "plait.actors._effects": ("EffectLoop",),
    "plait.actors._feed": ("DEFAULT_FEED_LIMIT", "Feed", "Kinds"),
    "plait.actors._journal": ("Journal",),
    "plait.actors.mcp._dispatch": ("McpLimits",),
    "plait.actors._messages": (
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
    "plait.actors._model": ("ModelClient",),
    "plait.actors._model_types": ("AttemptFailed", "ModelRequest", "ModelSettings"),
    "plait.actors._outside": ("IdFor", "NewId", "ReadInstructions", "read_instruction_file"),
    "plait.actors._pool": ("McpPool", "offer_servers"),
    "plait.actors._refs": ("Recipient",),
    "plait.actors._seams": (
        "ApprovalGateLike",
        "JournalLike",
        "McpPoolRef",
        "McpServersLike",
        "ModelClientLike",
        "ServersFactory",
    ),
    "plait.actors._session": ("Session",),
    "plait.actors._stream": ("ModelReply",),
    "plait.actors._text": ("lone_surrogate", "undecodable"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
