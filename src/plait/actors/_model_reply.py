"""What a turn records of its model's reply.

The reply is recorded with its token count in the same group as what it leads to: the task's
end when it has no tool calls, its calls (which the turn's ``ToolBatch`` runs), a compaction's
summary, or, for a reply the server stopped before it was whole, the task's end with its
calls refused (docs/conversations.md#a-turns-states).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from plait.actors._prompt import approx_tokens
from plait.actors._tool_batch import arguments_of
from plait.events import (
    Body,
    ModelResponded,
    TaskCompleted,
    TokensCounted,
    ToolCallCompleted,
    ToolCallRequested,
    Usage,
)

if TYPE_CHECKING:
    from plait.actors._stream import ModelReply

__all__ = ["CUT_OFF", "cut_off", "reply_bodies"]

CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons of a reply the server stopped before it was whole."""


def reply_bodies(
    reply: ModelReply, window: int | None, protocol: int, sent_tokens: Callable[[], int]
) -> list[Body]:
    """The reply and its token count: the server's, or (it sent none) plait's estimate, the
    request as sent (``sent_tokens``) and the reply as received."""
    bodies: list[Body] = [
        ModelResponded(
            reply.text,
            list(reply.tool_calls),
            reply.finish_reason,
            reply.usage,
            reply.reasoning,
            reply.cut_by,
            reply.response_id,
            reply.response_model,
            list(reply.reasoning_items),
        )
    ]
    if reply.usage is not None:
        bodies.append(TokensCounted(reply.usage, window))
    elif protocol >= 1:
        prompt = sent_tokens()
        sizes = [len(reply.text), len(reply.reasoning)]
        sizes += [len(c.name) + len(arguments_of(c)) for c in reply.tool_calls]
        completion = approx_tokens(sum(sizes))
        usage = Usage(prompt, completion, prompt + completion)
        bodies.append(TokensCounted(usage, window, estimated=True))
    return bodies


def cut_off(reply: ModelReply, protocol: int) -> list[Body] | None:
    """For a reply the server stopped, or plait at a limit, before it was whole: the task's
    end (``TaskCompleted.cut_off``), its text kept, its calls (which may be cut short) refused
    unrun. ``None`` for a whole reply."""
    reason = reply.finish_reason if reply.finish_reason in CUT_OFF else None
    if reason is None or protocol < 1:
        return None
    why = reply.cut_by or f"finish_reason {reason}"
    refused = f"not run: the reply was cut off ({why}) before it was whole"
    calls = reply.tool_calls
    return [
        *[ToolCallRequested(c.id, c.name, c.arguments) for c in calls],
        *[ToolCallCompleted(c.id, refused, "refused") for c in calls],
        TaskCompleted(reply.text, cut_off=reason),  # type: ignore[arg-type]
    ]
