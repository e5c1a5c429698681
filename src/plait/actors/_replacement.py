"""What replaces a task when its model calls ``conv_create`` or ``conv_send``.

The task ends, and the target's task and a continuation that answers the call are queued
first (docs/conv-tools.md#interrupt-and-switch): ``replacement`` checks the call, opens or
checks its target (``targets``), and returns the group of events that says so, which the
turn records as one.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import msgspec

from plait.actors import _builtins as builtins
from plait.actors import _targets as targets
from plait.actors._builtins import ConvCreate, ConvSend
from plait.actors._messages import ToolResult
from plait.actors._outside import IdFor
from plait.events import (
    Body,
    Closure,
    NewEvent,
    TaskEnqueued,
    TaskPlan,
    ToolCall,
    ToolCallCompleted,
    TurnAborted,
)

if TYPE_CHECKING:
    from plait.actors._deps import ConversationDeps
    from plait.actors._refs import Askable
    from plait.events import ConversationOpened

__all__ = ["replacement"]


def replacement(
    plan: TaskPlan,
    caller: tuple[str, ConversationOpened],
    call: tuple[ToolCall, str, str],
    rest: list[ToolCall],
    deps: ConversationDeps,
    session: Askable,
    record: Callable[[Body], object],
) -> list[NewEvent] | ToolResult:
    """The events that replace task ``plan`` by the target's task and a continuation, or the
    tool error to answer the call with.

    ``caller``: the calling conversation and its context; ``call``: the call, its interrupting
    built-in's name and its arguments; ``rest``: the calls after it in the reply (they are
    answered ``aborted: replaced``); ``record`` records an event for the caller."""
    (caller_id, context), (tool_call, name, arguments) = caller, call
    parsed = builtins.parse_arguments(name, arguments)
    depth = plan.chain_depth + 1
    if isinstance(parsed, str):
        return ToolResult(parsed, "error")
    assert isinstance(parsed, ConvCreate | ConvSend)  # the interrupting built-ins
    if depth > deps.max_interrupt_chain_depth:
        limit = deps.max_interrupt_chain_depth
        return ToolResult(f"{name} refused: interrupt chain depth limit {limit} reached", "error")
    task_id = plan.task_id
    made = partial(IdFor, task_id=task_id, call_id=tool_call.id)
    target = targets.resolve(
        parsed, caller_id, made("conversation"), context, deps, session, record
    )
    if isinstance(target, str):
        return ToolResult(msgspec.json.encode({"ok": False, "reason": target}).decode(), "error")
    target_id, items, first_message = target
    new_task = TaskPlan(deps.new_id(made("task")), target_id, items, chain_depth=depth)
    closure = Closure(
        tool_call.id,
        name,
        target_task_id=new_task.task_id,
        target_conversation_id=target_id,
        first_user_message=first_message if name == "conv_create" else None,
        first_items_count=len(items) if name == "conv_create" else None,
    )
    continuation_id = deps.new_id(made("continuation"))
    continuation = TaskPlan(continuation_id, caller_id, closure=closure, chain_depth=depth)
    # The task's end and the plans that replace it are one group: a crash keeps both or
    # neither, so the call is never left waiting for a continuation that was not queued.
    ended = [
        *[
            ToolCallCompleted(later.id, "aborted: replaced", "error", aborted_by="replaced")
            for later in rest
        ],
        TurnAborted(
            "replaced", "replaced", f"{name} -> {target_id}", awaiting_call_ids=[tool_call.id]
        ),
    ]
    queued = [
        NewEvent(TaskEnqueued(task, front=True), task.conversation_id, task.task_id)
        for task in (new_task, continuation)
    ]
    return [NewEvent(body, caller_id, task_id) for body in ended] + queued
