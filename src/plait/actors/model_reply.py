"""Go on from a turn's model reply: record it, then run its calls or end the task.

The reply is recorded with its token count in the same group as what it leads to: the task's
end when it has no tool calls, its calls (then ``tool_batch`` runs them), a compaction's
summary, or, for a reply the server stopped before it was whole, the task's end with its
calls refused. A failed request aborts the task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.actors import compaction, interrupts, tool_batch
from plait.actors.messages import ModelFinished
from plait.actors.prompt import approx_tokens
from plait.events.types import (
    Body,
    ModelResponded,
    TaskCompleted,
    TokensCounted,
    ToolCallCompleted,
    ToolCallRequested,
)
from plait.events.values import Usage

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation
    from plait.actors.stream import ModelReply

__all__ = ["CUT_OFF", "on_finished"]

CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons of a reply the server stopped before it was whole."""


def on_finished(conv: Conversation, finished: ModelFinished) -> None:
    """Record the reply of the current turn's request (or abort on its failure) and go on."""
    run = conv.run
    if run is None or finished.token != run.token:
        return  # a call whose turn was aborted: nothing of it is applied
    run.model_future = None
    reply = finished.reply
    if finished.error is not None or reply is None:
        why = finished.error or "the model call ended with no reply"
        interrupts.abort(conv, "failed", "model", why, model_error=finished.error_kind)
        return
    calls = list(reply.tool_calls)
    bodies: list[Body] = [
        ModelResponded(
            reply.text,
            calls,
            reply.finish_reason,
            reply.usage,
            reply.reasoning,
            reply.cut_by,
            reply.response_id,
            reply.response_model,
        )
    ]
    window, usage = conv.deps.history.context_window, reply.usage
    if usage is not None:
        bodies.append(TokensCounted(usage, window))
    elif conv.deps.model_protocol >= 1:  # the server sent none: count it ourselves
        bodies.append(TokensCounted(_estimated(conv, reply), window, estimated=True))
    if run.compacting is not None:
        compaction.finish(conv, reply, bodies)
        return
    cut_off = reply.finish_reason if reply.finish_reason in CUT_OFF else None
    if cut_off is not None and conv.deps.model_protocol >= 1:
        _cut_off(conv, reply.cut_by or f"finish_reason {cut_off}", reply, bodies)
        return
    if not calls:
        # The reply and the task's end belong together: one transaction, one fsync.
        conv.record(*bodies, TaskCompleted(reply.text))
        conv.end()
        return
    tool_batch.run(conv, calls, bodies)


def _estimated(conv: Conversation, reply: ModelReply) -> Usage:
    """The reply's usage as plait counts it: the request as sent, the reply as received."""
    prompt = conv.sent_tokens()
    sizes = [len(reply.text), len(reply.reasoning)]
    sizes += [len(c.name) + len(tool_batch.arguments_of(c)) for c in reply.tool_calls]
    completion = approx_tokens(sum(sizes))
    return Usage(prompt, completion, prompt + completion)


def _cut_off(conv: Conversation, why: str, reply: ModelReply, bodies: list[Body]) -> None:
    """End the task with the reply the server stopped, or plait at a limit
    (``TaskCompleted.cut_off``): its text is kept; its calls, which may be cut short, are
    not run."""
    refused = f"not run: the reply was cut off ({why}) before it was whole"
    calls = reply.tool_calls
    conv.record(
        *bodies,
        *[ToolCallRequested(c.id, c.name, c.arguments) for c in calls],
        *[ToolCallCompleted(c.id, refused, "refused") for c in calls],
        TaskCompleted(reply.text, cut_off=reply.finish_reason),  # type: ignore[arg-type]
    )
    conv.end()
