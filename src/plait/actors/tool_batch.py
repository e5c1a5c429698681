"""Run one turn's tool calls: all at once if all are read-only, else one by one, in order.

The calls of a model reply form a ``ToolBatch``. MCP calls go to the pool (their ends come back
as ``ToolFinished``), after an approval if the conversation's policy asks for one; built-ins run
in the session; an interrupting built-in replaces the task. Outputs are recorded in the model's
order even when calls run concurrently, so the log (and a replay of it) does not depend on which
call happened to finish first (docs/tools.md#running-calls). When every call is answered, the
turn loops.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

import msgspec

from plait.actors import builtins, call_approvals, interrupts
from plait.actors.approvals import refusal
from plait.actors.messages import (
    ApprovalFinished,
    BuiltinCall,
    CallTool,
    ToolFinished,
    ToolResult,
)
from plait.events.types import Body, ToolApprovalDecided, ToolCallRequested, ToolCallStarted
from plait.events.values import McpToolSnapshot, ToolCall

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation

__all__ = ["ToolBatch", "arguments_of", "on_decision", "on_finished", "run"]


class ToolBatch(msgspec.Struct):
    """The tool calls of one model reply, being run."""

    calls: list[ToolCall]
    """In the model's order."""
    names: list[str | None]
    """Each call's canonical tool name; ``None``: no such tool here."""
    mcp: frozenset[str]
    """The names that are MCP tools (run by the pool)."""
    parallel: bool
    """All read-only: start them all at once."""
    started: int = 0
    """Calls started (a prefix)."""
    recorded: int = 0
    """Calls whose ``ToolCallCompleted`` is recorded (a prefix)."""
    results: dict[int, ToolResult] = {}
    """Ended calls not yet recorded, by index."""
    asks: list[str | None] = []
    """Why each call waits for an approval decision before it runs (``None``: it does not)."""
    awaiting: dict[int, Future[ToolApprovalDecided]] = {}
    """Calls started that wait for their decision, by index: the decision's future (an
    abort cancels it; the decision comes back as ``ApprovalFinished``)."""


def run(conv: Conversation, calls: list[ToolCall], reply: list[Body]) -> None:
    """Record the reply with its calls (one transaction, one fsync), then run them."""
    assert conv.run is not None
    offered = {tool.name: tool for tool in conv.run.tool_view.tools}
    prefs = conv.context.tool_prefs
    # A name the model made up, or of a tool outside this conversation's view (a built-in
    # whose switch is off), is None.
    names = [
        _name(c.name, offered, prefs.include_plan_tool, prefs.conversation_tools) for c in calls
    ]
    read_only = [
        name in builtins.READ_ONLY or (name in offered and offered[name].read_only)
        for name in names
    ]
    mcp = frozenset(name for name in names if name in offered)
    asks = conv.approvals.reasons(names, offered)
    batch = ToolBatch(calls, names, mcp, parallel=all(read_only), asks=asks)
    conv.record(
        *reply,
        *[
            ToolCallRequested(call.id, name or call.name, call.arguments, read_only=ro)
            for call, name, ro in zip(calls, names, read_only, strict=True)
        ],
        *(_hold(conv, batch) if conv.run.stop is None else ()),  # a stop starts no call
        # Built-ins act only on the session, by events written after these: the reply and its
        # calls may be written with what follows (docs/event-log.md#writing-ahead).
        ahead=not mcp,
    )
    conv.run.batch = batch
    _advance(conv)


def _hold(conv: Conversation, batch: ToolBatch) -> list[ToolCallStarted]:
    """The starts of the MCP calls ``_advance`` sends at once, their slots taken: recorded
    with the reply, they cost no commit of their own (docs/tools.md#running-calls)."""
    first = len(batch.calls) if batch.parallel else 1
    now = [i for i in range(first) if batch.names[i] in batch.mcp and batch.asks[i] is None]
    return conv.pool.hold([_request(conv, batch, i) for i in now]) if now else []


def _advance(conv: Conversation) -> None:
    """Start what may start, record what ended in the model's order, then loop the turn."""
    assert conv.run is not None and conv.run.batch is not None
    batch = conv.run.batch
    while batch.recorded < len(batch.calls):
        index = batch.recorded
        if index in batch.results:
            result = batch.results.pop(index)
            call = batch.calls[index]
            conv.record(result.completed(call.id), ahead=not batch.mcp)
            batch.recorded += 1
            if result.control is not None:
                conv.run.control = result.control  # the last one asked for holds
        elif batch.started <= index:
            if interrupts.settle(conv):
                return  # a stop was asked: no call starts
            last = len(batch.calls) if batch.parallel else index + 1
            while batch.started < last:
                batch.started += 1
                if _start(conv, batch, batch.started - 1):
                    return  # the task was replaced by an interrupting tool
        else:
            # A call runs elsewhere, or waits for its approval: its ToolFinished (or
            # ApprovalFinished) continues the batch; after a stop, only a call that runs does.
            interrupts.settle(conv)
            return
    conv.run.batch = None
    control, conv.run.control = conv.run.control, None
    # A context change a tool asked for applies from the next turn
    # (docs/conversations.md#context-changes).
    if control is None or conv.change_context(control):
        conv.next_turn()


def _start(conv: Conversation, batch: ToolBatch, index: int) -> bool:
    """Run or start call ``index``; True when it replaced the task (conv_create/send)."""
    call, name = batch.calls[index], batch.names[index]
    arguments = arguments_of(call)
    if name is None:
        batch.results[index] = _refused(f"unknown tool {call.name!r}: it is not offered here")
    elif name in batch.mcp:
        if batch.asks[index] is None or call_approvals.ask(conv, batch, index, name, arguments):
            _send_to_pool(conv, index)
    elif name == builtins.PLAN_TOOL:
        batch.results[index] = _update_plan(conv, call.id, arguments, ahead=not batch.mcp)
    elif name in builtins.INTERRUPTING:
        outcome = interrupts.replace(conv, call, name, arguments, batch.calls[index + 1 :])
        if outcome is None:
            return True
        batch.results[index] = outcome
    else:
        batch.results[index] = _builtin(conv, name, arguments)
    return False


def _send_to_pool(conv: Conversation, index: int) -> None:
    """Send call ``index`` of the batch to its MCP server (``ToolFinished`` comes back)."""
    assert conv.run is not None and conv.run.batch is not None
    conv.pool.call(_request(conv, conv.run.batch, index))


def _request(conv: Conversation, batch: ToolBatch, index: int) -> CallTool:
    assert conv.run is not None
    call, name = batch.calls[index], batch.names[index] or ""
    task, token = conv.run.plan.task_id, conv.run.token
    return CallTool(conv.id, task, call.id, token, index, name, arguments_of(call), conv.actor_ref)


def on_finished(conv: Conversation, finished: ToolFinished) -> None:
    """Hold the call's result, and record what can be recorded."""
    run = conv.run
    if run is None or run.batch is None or finished.token != run.token:
        return  # a call whose turn was aborted: nothing of it is applied
    run.batch.results[finished.index] = finished.result
    _advance(conv)


def on_decision(conv: Conversation, finished: ApprovalFinished) -> None:
    """Record the decision, then send the call to its server or answer it refused."""
    run = conv.run
    if run is None or run.batch is None or finished.token != run.token or run.stop is not None:
        return  # a decision that came after its turn was aborted, or a stop: dropped
    batch, index, decision = run.batch, finished.index, finished.decision
    if batch.awaiting.pop(index, None) is None:
        return
    conv.record(decision)
    if decision.approved:
        _send_to_pool(conv, index)
        return
    batch.results[index] = _refused(refusal(decision))
    _advance(conv)


def _name(
    name: str, offered: dict[str, McpToolSnapshot], plan: bool, conversations: bool
) -> str | None:
    """The canonical name of a call's tool, ``None`` if there is no such tool here."""
    builtin = builtins.canonical_name(name)
    if builtin is None:
        return name if name in offered else None
    return builtin if (plan if builtin == builtins.PLAN_TOOL else conversations) else None


def _update_plan(conv: Conversation, call_id: str, arguments: str, ahead: bool) -> ToolResult:
    """Record the plan the call sets (docs/tools.md#plan); a bad one changes nothing."""
    parsed = builtins.parse_arguments(builtins.PLAN_TOOL, arguments)
    if isinstance(parsed, str):
        return ToolResult(parsed, "error")
    assert isinstance(parsed, builtins.UpdatePlan)
    conv.record(parsed.updated(call_id), ahead=ahead)
    return ToolResult("Plan updated", "ok")


def _builtin(conv: Conversation, name: str, arguments: str) -> ToolResult:
    parsed = builtins.parse_arguments(name, arguments)
    if isinstance(parsed, str):
        return ToolResult(parsed, "error")
    started = time.monotonic()  # the duration enters the log as data
    result = conv.session.ask(BuiltinCall(conv.id, name, parsed), timeout=30)
    elapsed = (time.monotonic() - started) * 1000
    return ToolResult(msgspec.json.encode(result).decode(), "ok", elapsed)


def arguments_of(call: ToolCall) -> str:
    """The call's arguments as the model sent them (``{}`` if the log no longer has them)."""
    return call.arguments if isinstance(call.arguments, str) else "{}"


def _refused(why: str) -> ToolResult:
    return ToolResult(why, "refused")
