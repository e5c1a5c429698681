"""A hand-written recording of a conv_create interrupt-and-continue story, for projection tests
and the golden logs: the root conversation creates a helper with ``conv_create``, the helper
calls a read-only tool, the root continues with the helper's answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from plait.events import (
    Body,
    Closure,
    ConversationOpened,
    InputText,
    ModelRequested,
    ModelResponded,
    NewEvent,
    SessionStarted,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TokensCounted,
    ToolCall,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
    TurnStarted,
    Usage,
)

__all__ = ["demo_events"]

QUESTION = "What time is it in Tokyo? Ask a helper conversation to find out."
HELPER_TASK = "Find the current time in Tokyo with the time tool."
HELPER_ANSWER = "It is 18:04 in Tokyo (Asia/Tokyo, UTC+9)."
FINAL_ANSWER = "My helper checked: it is 18:04 in Tokyo."


def demo_events(
    start: datetime, new_id: Callable[[], str] = lambda: str(uuid.uuid4())
) -> tuple[str, list[NewEvent]]:
    """Return a session id and the events of the demo session, a few milliseconds apart."""
    session, root, helper = new_id(), new_id(), new_id()
    t_root, t_helper, t_cont = new_id(), new_id(), new_id()
    create_call, time_call = f"call_{new_id()[:8]}", f"call_{new_id()[:8]}"
    out: list[NewEvent] = []

    def add(body: Body, conversation: str | None = None, task: str | None = None) -> None:
        out.append(NewEvent(body, conversation, task, start + timedelta(milliseconds=len(out))))

    def model_turn(
        conv: str, task: str, turn: int, text: str, calls: list[ToolCall], tokens: int
    ) -> None:
        add(TurnStarted(turn=turn), conv, task)
        add(ModelRequested("demo-model", "tools", "instructions", message_count=turn), conv, task)
        usage = Usage(prompt_tokens=tokens, completion_tokens=20, total_tokens=tokens + 20)
        finish = "tool_calls" if calls else "stop"
        add(ModelResponded(text, calls, finish, usage), conv, task)
        add(TokensCounted(usage, context_window=128_000), conv, task)

    add(SessionStarted(root_conversation_id=root, model="demo-model"))
    add(ConversationOpened(base_instructions="You are the demo's root agent."), root)
    add(TaskEnqueued(TaskPlan(t_root, root, [InputText(QUESTION)])), root, t_root)
    add(TaskStarted(), root, t_root)
    create_args = json.dumps({"user_instruction": HELPER_TASK, "mcp_allowlist": ["time__now"]})
    call = ToolCall(create_call, "conv_create", create_args)
    model_turn(root, t_root, 1, "I'll ask a helper conversation.", [call], 120)
    add(ToolCallRequested(create_call, "conv_create", create_args), root, t_root)
    add(
        TurnAborted("replaced", "replaced", "conv_create", awaiting_call_ids=[create_call]),
        root,
        t_root,
    )
    add(ConversationOpened(parent_id=root, mcp_allowlist=["time__now"]), helper)
    add(TaskEnqueued(TaskPlan(t_helper, helper, [InputText(HELPER_TASK)], chain_depth=1)), helper)
    plan = TaskPlan(t_cont, root, closure=Closure(create_call, "conv_create"), chain_depth=1)
    add(TaskEnqueued(plan), root, t_cont)
    add(TaskStarted(), helper, t_helper)
    time_args = json.dumps({"timezone": "Asia/Tokyo"})
    model_turn(helper, t_helper, 1, "", [ToolCall(time_call, "time__now", time_args)], 90)
    add(ToolCallRequested(time_call, "time__now", time_args, read_only=True), helper, t_helper)
    tokyo = json.dumps({"timezone": "Asia/Tokyo", "datetime": "2026-11-23T18:04:00+09:00"})
    add(ToolCallCompleted(time_call, tokyo, duration_ms=3.2), helper, t_helper)
    model_turn(helper, t_helper, 2, HELPER_ANSWER, [], 140)
    add(TaskCompleted(HELPER_ANSWER), helper, t_helper)
    add(TaskStarted(), root, t_cont)
    payload = json.dumps({"conversation_id": helper, "last_assistant_message": HELPER_ANSWER})
    add(ToolCallCompleted(create_call, payload, duration_ms=25.0), root, t_cont)
    model_turn(root, t_cont, 1, FINAL_ANSWER, [], 200)
    add(TaskCompleted(FINAL_ANSWER), root, t_cont)
    return session, out
