"""Where ``conv_create`` and ``conv_send`` send their work: the target conversation, checked.

``conv_send`` names a live conversation (not the caller, not one waiting in the current chain);
``conv_create`` opens one, with base instructions given as text or read from a file inside
the session's working directory, an MCP allowlist checked by the pool, and the caller's
context inherited where nothing is given (docs/conversations.md#conversation-context).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import msgspec

from plait.actors import _builtins as builtins
from plait.actors._builtins import ConvCreate, ConvSend
from plait.actors._messages import (
    Allowlist,
    BuiltinCall,
    CheckAllowlist,
    OpenConversation,
    frozen_names,
)
from plait.actors._outside import IdFor
from plait.events import Body, ConversationOpened, InputItem, McpAllowlistNormalized, ToolPrefs

if TYPE_CHECKING:
    from plait.actors._deps import ConversationDeps
    from plait.actors._seams import Askable, McpPoolRef

__all__ = ["Target", "check_allowlist", "resolve"]

Target = tuple[str, list[InputItem], str | None]
"""The target conversation, the input of its task, and (``conv_create``) its first message."""


def resolve(
    parsed: ConvCreate | ConvSend,
    caller_id: str,
    made_for: IdFor,
    context: ConversationOpened,
    deps: ConversationDeps,
    session: Askable,
    record: Callable[[Body], object],
) -> Target | str:
    """Open or check the target conversation; return it with the task's input, or why not.

    ``made_for`` names the call (``conversation``: what its new conversation is for);
    ``deps`` is the caller's ``ConversationDeps``; ``record`` records an event for the caller.
    """
    if isinstance(parsed, ConvSend):
        check = _answer(session.ask(BuiltinCall(caller_id, "conv_send", parsed), timeout=30))
        if not check.get("ok"):
            return str(check.get("reason"))
        return parsed.conversation_id, builtins.input_items(parsed.text, parsed.items), None
    base = parsed.base_instruction_text
    if parsed.base_instruction_file is not None:
        read = deps.read_instructions(made_for, parsed.base_instruction_file)
        if read.startswith("!"):
            return read[1:]
        base = read
    prefs = None
    if parsed.internal_tools is not None:
        given = msgspec.structs.asdict(parsed.internal_tools).items()
        known = {k: v for k, v in given if v is not None and k in ToolPrefs.__struct_fields__}
        prefs = msgspec.structs.replace(context.tool_prefs, **known)
    allowlist = parsed.mcp_allowlist
    if allowlist:
        checked = check_allowlist(deps.pool, allowlist, record)
        if isinstance(checked, str):
            return checked
        allowlist = checked
    opened = _answer(
        session.ask(
            OpenConversation(
                deps.new_id(made_for),
                caller_id,
                base,
                inherit_base=base is None,
                mcp_allowlist=frozen_names(allowlist),
                tool_prefs=prefs,
            ),
            timeout=30,
        )
    )
    if not opened.get("ok"):
        return str(opened.get("reason"))
    items = builtins.input_items(parsed.user_instruction, parsed.items)
    return str(opened["conversation_id"]), items, parsed.user_instruction


def check_allowlist(
    pool: McpPoolRef | None, entries: list[str], record: Callable[[Body], object]
) -> list[str] | str:
    """Return an allowlist (``conv_create``'s, or a context change's) normalized, or why it
    is refused."""
    if pool is None:
        return f"mcp_allowlist names {entries[0]!r}, but this session has no MCP servers"
    checked = cast(Allowlist | str, pool.ask(CheckAllowlist(tuple(entries)), timeout=30))
    if isinstance(checked, str):
        return checked
    if checked.deprecated:
        record(McpAllowlistNormalized(list(checked.deprecated), list(checked.became)))
    return list(checked.names)


def _answer(answer: object) -> dict[str, object]:
    """The session's answer to a built-in call: a JSON object (``ok``, and ``reason`` or what
    was made)."""
    return cast(dict[str, object], answer)
