"""End a task early: an abort, at the checkpoint it finds the turn in, or a replacement.

An abort (an interrupt, a failure) records ``TurnAborted`` with the ``Checkpoint`` the turn was
at, which says what the history gets (docs/interrupts.md#checkpoints). A replacement is what
an interrupting tool (``conv_create``, ``conv_send``) does: the task ends, and the target's
task and a continuation that answers the call are queued first
(docs/conv-tools.md#interrupt-and-switch). A stop on purpose waits for the next checkpoint
(``stop_at_checkpoint``, ``settle``): what runs ends first, nothing more starts.
"""

from __future__ import annotations

from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, Literal

import msgspec

from plait.actors import builtins, targets
from plait.actors.builtins import ConvCreate, ConvSend
from plait.actors.messages import CancelCalls, ToolResult
from plait.actors.outside import IdFor
from plait.errors import ModelErrorKind
from plait.events.types import (
    AbortCause,
    Body,
    NewEvent,
    StopRequested,
    TaskEnqueued,
    TokensCounted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.events.values import Closure, TaskPlan, ToolCall, Usage

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation

__all__ = ["Checkpoint", "abort", "checkpoint", "replace", "settle", "stop_at_checkpoint"]


class Checkpoint(IntEnum):
    """Where an interrupt finds the turn; recorded as ``TurnAborted.checkpoint``."""

    NONE = 0
    """Anything else (a model request in flight, or not an interrupt): each unanswered call
    gets ``aborted: <reason>``."""
    REPLY_RECORDED = 1
    """The reply is recorded and no call has begun: each call is answered with
    ``CANCEL_MESSAGE``, and ``INTERRUPT_MESSAGE`` follows."""
    CALLS_ANSWERED = 2
    """Every call of the last reply is answered and the next request is not out:
    ``INTERRUPT_TEXT`` is added to the last tool output."""
    CALL_NOT_BEGUN = 3
    """Some calls are answered and the next one has not begun (it waits for its approval, or
    its turn): each unanswered call gets ``CANCEL_MESSAGE``."""
    CALL_RUNNING = 4
    """A call is running: each unanswered call gets ``CANCEL_MESSAGE``."""


def abort(
    conv: Conversation,
    reason: Literal["interrupted", "replaced", "failed"],
    cause: AbortCause,
    detail: str,
    *after: Body,
    model_error: ModelErrorKind | None = None,
) -> None:
    """End the running task now: cancel what it has out, record ``TurnAborted`` (then
    ``after``) as one group, and free the timeline."""
    assert conv.run is not None
    run = conv.run
    by_interrupt = reason == "interrupted" and conv.deps.interrupt_checkpoints
    found = checkpoint(conv) if by_interrupt else Checkpoint.NONE
    counted: list[Body] = []
    if run.model_future is not None:
        run.model_future.cancel()  # closes the HTTP stream at once
        if by_interrupt:  # the request was sent, so it counts toward usage: estimated
            window = conv.deps.history.context_window
            sent = conv.sent_tokens()
            tokens = Usage(sent, 0, sent)
            counted.append(TokensCounted(tokens, window, estimated=True))
    if run.batch is not None:
        for deciding in run.batch.awaiting.values():
            deciding.cancel()  # a call waiting for its approval waits no more
        if run.batch.mcp:
            conv.pool.tell(CancelCalls(conv.id, run.token))
    try:
        aborted = TurnAborted(
            reason,
            cause,
            detail,
            checkpoint=int(found),  # type: ignore[arg-type]
            model_error=model_error,
        )
        conv.record(aborted, *counted, *after)
    finally:
        conv.end()


def checkpoint(conv: Conversation) -> Checkpoint:
    """Where an interrupt finds the running task's turn."""
    assert conv.run is not None
    run, batch = conv.run, conv.run.batch
    if batch is None:
        # Every call of the last reply answered, and the next request not out (the turn
        # waits for MCP servers, or a compaction runs first).
        before_request = run.model_future is None or run.compacting is not None
        history = conv.history()
        if before_request and history and history[-1].role == "tool":
            return Checkpoint.CALLS_ANSWERED
        return Checkpoint.NONE
    unanswered = range(batch.recorded, batch.started)
    if any(i not in batch.results and i not in batch.awaiting for i in unanswered):
        return Checkpoint.CALL_RUNNING
    if batch.recorded or batch.results:
        return Checkpoint.CALL_NOT_BEGUN
    return Checkpoint.REPLY_RECORDED


def stop_at_checkpoint(conv: Conversation, detail: str) -> None:
    """End the running task at its next checkpoint, with the cause ``shutdown``
    (docs/interrupts.md#stopping-at-a-checkpoint): now, if nothing of its turn runs; else
    record ``StopRequested`` (replay feeds it in where it was recorded, so the program stops
    where it stopped), let the model's reply or the running calls end and be recorded, and
    start nothing more (``settle`` ends it)."""
    assert conv.run is not None
    run = conv.run
    if run.stop is not None:
        return  # asked already
    if not _running(conv):
        abort(conv, "interrupted", "shutdown", detail)
        return
    conv.record(StopRequested(detail))
    run.stop = detail
    if run.batch is not None:
        for deciding in run.batch.awaiting.values():
            deciding.cancel()  # a call waiting for its approval will not run: it waits no more


def settle(conv: Conversation) -> bool:
    """At a checkpoint of the running turn: if a stop was asked and nothing of the turn runs
    any more, end the task here; return whether it ended."""
    run = conv.run
    if run is None or run.stop is None or _running(conv):
        return False
    abort(conv, "interrupted", "shutdown", run.stop)
    return True


def _running(conv: Conversation) -> bool:
    """Whether the turn waits for something that runs: the model's reply (or a compaction's),
    or a call sent to its server. A call waiting for its approval, or for its turn, does not
    run."""
    assert conv.run is not None
    run = conv.run
    if run.model_future is not None:
        return True
    return run.batch is not None and checkpoint(conv) is Checkpoint.CALL_RUNNING


def replace(
    conv: Conversation, call: ToolCall, name: str, arguments: str, rest: list[ToolCall]
) -> ToolResult | None:
    """Replace the running task by the target's task and a continuation; ``None`` once
    replaced, else the tool error to answer the call with.

    ``name`` is an interrupting built-in; ``rest``, the calls after it in the reply (they
    are answered ``aborted: replaced``)."""
    assert conv.run is not None
    parsed = builtins.parse_arguments(name, arguments)
    depth = conv.run.plan.chain_depth + 1
    if isinstance(parsed, str):
        return ToolResult(parsed, "error")
    assert isinstance(parsed, ConvCreate | ConvSend)  # the interrupting built-ins
    if depth > conv.deps.max_interrupt_chain_depth:
        limit = conv.deps.max_interrupt_chain_depth
        return ToolResult(f"{name} refused: interrupt chain depth limit {limit} reached", "error")
    task_id = conv.run.plan.task_id
    made = partial(IdFor, task_id=task_id, call_id=call.id)
    target = targets.resolve(
        parsed,
        conv.id,
        made("conversation"),
        conv.context,
        conv.deps,
        conv.session,
        lambda b: conv.record(b),
    )
    if isinstance(target, str):
        return ToolResult(msgspec.json.encode({"ok": False, "reason": target}).decode(), "error")
    target_id, items, first_message = target
    new_task = TaskPlan(conv.deps.new_id(made("task")), target_id, items, chain_depth=depth)
    closure = Closure(
        call.id,
        name,
        target_task_id=new_task.task_id,
        target_conversation_id=target_id,
        first_user_message=first_message if name == "conv_create" else None,
        first_items_count=len(items) if name == "conv_create" else None,
    )
    continuation_id = conv.deps.new_id(made("continuation"))
    continuation = TaskPlan(continuation_id, conv.id, closure=closure, chain_depth=depth)
    # The task's end and the plans that replace it are one group: a crash keeps both or
    # neither, so the call is never left waiting for a continuation that was not queued.
    ended = [
        *[
            ToolCallCompleted(later.id, "aborted: replaced", "error", aborted_by="replaced")
            for later in rest
        ],
        TurnAborted("replaced", "replaced", f"{name} -> {target_id}", awaiting_call_ids=[call.id]),
    ]
    queued = [
        NewEvent(TaskEnqueued(plan, front=True), plan.conversation_id, plan.task_id)
        for plan in (new_task, continuation)
    ]
    conv.record_events([NewEvent(body, conv.id, task_id) for body in ended] + queued)
    conv.end()
    return None
