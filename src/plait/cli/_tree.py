"""``plait tree``: a session's conversations as a tree, each task with its timeline.

A conversation hangs under the task that was running when it opened (the task whose
``conv_create`` made it, docs/conv-tools.md); under each task stand its tool calls, with their
outcome and duration, in the order they were made. ``tree_lines`` is a pure function of the
session's events, so a test can read it without a terminal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from plait.cli._style import PLAIN, Style
from plait.events import (
    ConversationDestroyed,
    ConversationOpened,
    Event,
    InputText,
    SessionClosed,
    SessionStarted,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
    last_done,
)

__all__ = ["tree_lines"]

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
"""An id, shown by its first 8 characters as everywhere in the tree."""
_WIDTH = 60
"""Characters of a task's input shown before it is cut."""


@dataclass
class _Call:
    tool: str
    outcome: str = "pending"
    duration_ms: float | None = None


@dataclass
class _Task:
    id: str
    what: str
    started: Event | None = None
    ended: Event | None = None
    outcome: str = "waiting"
    detail: str = ""
    calls: dict[str, _Call] = field(default_factory=dict)
    children: list[_Conversation] = field(default_factory=list)


@dataclass
class _Conversation:
    id: str
    parent_id: str | None
    destroyed: bool = False
    tasks: list[_Task] = field(default_factory=list)
    children: list[_Conversation] = field(default_factory=list)
    """Opened while none of its tasks ran (by the embedder)."""


def tree_lines(events: list[Event], style: Style = PLAIN) -> list[str]:
    """Return the lines of ``plait tree`` for one session's events, in log order."""
    if not events:
        return []
    conversations: dict[str, _Conversation] = {}
    tasks: dict[str, _Task] = {}
    running: _Task | None = None
    calls: dict[str, _Call] = {}
    roots: list[_Conversation] = []
    for event in events:
        body, cid = event.body, event.conversation_id or ""
        if isinstance(body, ConversationOpened):
            conv = _Conversation(cid, body.parent_id)
            conversations[cid] = conv
            parent = conversations.get(body.parent_id or "")
            if parent is None:
                roots.append(conv)
            elif running is not None and running in parent.tasks:
                running.children.append(conv)
            else:
                parent.children.append(conv)
        elif isinstance(body, ConversationDestroyed) and cid in conversations:
            conversations[cid].destroyed = True
        elif isinstance(body, TaskEnqueued):
            tasks[body.plan.task_id] = _Task(body.plan.task_id, _what(body))
            if cid in conversations:
                conversations[cid].tasks.append(tasks[body.plan.task_id])
        elif (task := tasks.get(event.task_id or "")) is None:
            continue
        elif isinstance(body, TaskStarted):
            task.started, task.outcome, running = event, "running", task
        elif isinstance(body, ToolCallRequested):
            task.calls[body.call_id] = calls[body.call_id] = _Call(body.tool)
        elif isinstance(body, ToolCallCompleted) and body.call_id in calls:
            calls[body.call_id].outcome = body.outcome
            calls[body.call_id].duration_ms = body.duration_ms
        elif isinstance(body, TaskCompleted | TurnAborted | TaskDropped):
            task.ended, task.outcome, task.detail = event, *_ending(body)
            if running is task:
                running = None
    lines = [_session_line(events, style)]
    for conv in roots:
        lines += _conversation(conv, "", "", style, root=conv is roots[0])
    return lines


def _what(body: TaskEnqueued) -> str:
    """What a task was given: its first text, the call it continues after, or its purpose."""
    plan = body.plan
    if plan.compact is not None:
        return "compaction"
    if plan.context is not None:
        return "context change"
    if plan.closure is not None:
        return f"continues after {plan.closure.tool_name}"
    for item in plan.input_items:
        if isinstance(item, InputText) and isinstance(item.text, str):
            text = " ".join(item.text.split())
            return repr(text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…")
    return "-"


def _ending(body: TaskCompleted | TurnAborted | TaskDropped) -> tuple[str, str]:
    """The outcome word of a task's end, and what more it says."""
    if isinstance(body, TaskCompleted):
        return ("cut off", body.cut_off) if body.cut_off else ("completed", "")
    if isinstance(body, TaskDropped):
        return "dropped", body.reason
    detail = body.model_error or body.detail
    return body.reason, _UUID.sub(lambda m: m.group()[:8], " ".join(detail.split()))


def _session_line(events: list[Event], style: Style) -> str:
    first, last = events[0], last_done(events)
    model = first.body.model if isinstance(first.body, SessionStarted) else ""
    state = "closed" if isinstance(last.body, SessionClosed) else "open"
    started = first.at.isoformat(timespec="milliseconds")
    return (
        f"{style.bold('session ' + first.stream)}  {model or '-'}  "
        f"{style.dim('started ' + started)}  {style.outcome(state)}"
    )


def _conversation(
    conv: _Conversation, lead: str, indent: str, style: Style, *, root: bool = False
) -> list[str]:
    name = "root" if root else "conversation"
    created = f"  {style.dim('created by ' + conv.parent_id[:8])}" if conv.parent_id else ""
    gone = "  " + style.yellow("destroyed") if conv.destroyed else ""
    lines = [f"{lead}{style.cyan(name + ' ' + conv.id[:8])}{created}{gone}"]
    items: list[_Task | _Conversation] = [*conv.tasks, *conv.children]
    for i, item in enumerate(items):
        last = i == len(items) - 1
        branch, more = ("└── ", "    ") if last else ("├── ", "│   ")
        if isinstance(item, _Task):
            lines += _task(item, indent + branch, indent + more, style)
        else:
            lines += _conversation(item, indent + branch, indent + more, style)
    return lines


def _task(task: _Task, lead: str, indent: str, style: Style) -> list[str]:
    when, took = "-", ""
    if task.started is not None:
        when = task.started.at.strftime("%H:%M:%S.%f")[:-3]
        if task.ended is not None:
            took = f"  {(task.ended.at - task.started.at).total_seconds():.3f} s"
    detail = f": {task.detail}" if task.detail else ""
    lines = [
        f"{lead}task {task.id[:8]}  {style.dim(when)}{took}  "
        f"{style.outcome(task.outcome)}{detail}  {style.dim(task.what)}"
    ]
    items: list[_Call | _Conversation] = [*task.calls.values(), *task.children]
    for i, item in enumerate(items):
        last = i == len(items) - 1
        branch, more = ("└── ", "    ") if last else ("├── ", "│   ")
        if isinstance(item, _Call):
            ms = "" if item.duration_ms is None else f"  {item.duration_ms:.1f} ms"
            lines.append(f"{indent}{branch}-> {item.tool}  {style.outcome(item.outcome)}{ms}")
        else:
            lines += _conversation(item, indent + branch, indent + more, style)
    return lines
