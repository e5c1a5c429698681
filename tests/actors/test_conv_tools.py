"""The conversation tools' rules (docs/conv-tools.md), each checked on the recorded events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted import assert_histories_valid, call, kinds, replayed, runtime_for

from plait.events import (
    AgentMessageDelta,
    ConversationOpened,
    Event,
    SessionClosed,
    TaskDropped,
    ToolCallCompleted,
    ToolPrefs,
    TurnAborted,
)
from plait.replay import replay
from plait.runtime import Runtime, SessionHandle
from plait.testing import ScriptedModelServer, Step


@pytest.fixture
def runtime(server: ScriptedModelServer, tmp_path: Path) -> Iterator[Runtime]:
    with runtime_for(server, tmp_path) as runtime:
        yield runtime


def outputs(runtime: Runtime, session: SessionHandle) -> list[Any]:
    events = runtime.store.read(session.session_id)
    return [json.loads(str(e.body.output)) for e in events if isinstance(e.body, ToolCallCompleted)]


def wait_for(feed: Any, test: Any) -> Event:
    """Return the first event on ``feed`` that passes ``test``."""
    while True:
        item = feed.get(timeout=10)
        assert item is not None, "the expected event never came"
        if isinstance(item, Event) and test(item):
            return item


def first_delta_outside(feed: Any, conversation: str) -> AgentMessageDelta:
    """Return the first text delta streamed by a conversation other than ``conversation``."""
    while True:
        item = feed.get(timeout=10)
        assert item is not None, "no text streamed"
        if isinstance(item, AgentMessageDelta) and item.conversation_id != conversation:
            return item


def test_events_of_conv_create_follow_the_documented_order_per_conversation(
    server: ScriptedModelServer, runtime: Runtime
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="sub task")]),
        Step(text="sub answer"),
        Step(text="final"),
    )
    session = runtime.start_session()
    assert session.run("go", timeout=30).ok
    events = runtime.store.read(session.session_id)
    root = session.root_conversation_id
    helper = next(c.id for c in session.conversations() if c.id != root)
    turn = ["TurnStarted", "ModelRequested", "ModelResponded", "TokensCounted"]
    assert kinds(events, root) == [
        "ConversationOpened",
        *["TaskEnqueued", "TaskStarted", *turn, "ToolCallRequested", "TurnAborted"],
        *["TaskEnqueued", "TaskStarted", "ToolCallCompleted", *turn, "TaskCompleted"],
    ]
    assert kinds(events, helper) == [
        "ConversationOpened",
        *["TaskEnqueued", "TaskStarted", *turn, "TaskCompleted"],
    ]


def test_conv_send_runs_the_target_and_returns_its_answer(
    server: ScriptedModelServer, runtime: Runtime
) -> None:
    server.push(
        Step(tool_calls=[call("conv.create", user_instruction="remember 42")]),  # dotted form
        Step(text="noted 42"),
        Step(text="helper made"),
    )
    session = runtime.start_session()
    assert session.run("make a helper", timeout=30).ok
    helper = next(c.id for c in session.conversations() if c.id != session.root_conversation_id)
    server.push(
        Step(
            tool_calls=[
                call("conv_send", conversation_id="nope", text="x"),
                call("conv_send", conversation_id=session.root_conversation_id, text="x"),
                call("conv_send", conversation_id=helper, text="what number?"),
            ]
        ),
        Step(text="42"),
        Step(text="the helper says 42"),
    )
    outcome = session.run("ask the helper", timeout=30)
    assert outcome.ok and outcome.last_assistant_message == "the helper says 42"
    results = outputs(runtime, session)[-3:]
    assert results[0] == {"ok": False, "reason": "conversation not found"}
    assert results[1] == {"ok": False, "reason": "a conversation cannot send to itself"}
    assert results[2] == {"conversation_id": helper, "last_assistant_message": "42"}
    assert session.history(helper)[-2:] == [
        {"role": "user", "content": "what number?"},
        {"role": "assistant", "content": "42"},
    ]
    assert_histories_valid(runtime.store.read(session.session_id))


def test_a_user_interrupt_drops_the_chain_and_keeps_histories_valid(
    server: ScriptedModelServer, runtime: Runtime
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="work slowly")]),
        Step(text="slow " * 300, chunk_chars=5, chunk_delay=0.01),
    )
    session = runtime.start_session()
    root = session.root_conversation_id
    with session.subscribe() as feed:
        task = session.submit("start")
        first_delta_outside(feed, root)
        session.interrupt()
        aborted = wait_for(feed, lambda e: isinstance(e.body, TurnAborted))
    assert isinstance(aborted.body, TurnAborted) and aborted.body.reason == "interrupted"
    assert aborted.body.cause == "user"
    events = runtime.store.read(session.session_id)
    dropped = [e for e in events if isinstance(e.body, TaskDropped)]
    assert [e.conversation_id for e in dropped] == [root]
    assert [e.body.cause for e in dropped] == ["user"]  # type: ignore[attr-defined]
    synthetic = [
        e.body
        for e in events
        if isinstance(e.body, ToolCallCompleted) and e.conversation_id == root
    ]
    assert [s.output for s in synthetic] == ["aborted: interrupted"]
    assert task != dropped[0].task_id
    assert_histories_valid(events)
    server.push(Step(text="fresh start"))
    assert session.run("again", timeout=30).last_assistant_message == "fresh start"
    assert [m["role"] for m in server.requests[-1].messages[-3:]] == ["assistant", "tool", "user"]


def test_with_the_switch_off_the_conversation_tools_are_neither_offered_nor_run(
    server: ScriptedModelServer, runtime: Runtime, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="Help."), call("conv_list")]),
        Step(text="On my own, then."),
    )
    session = runtime.start_session(tool_prefs=ToolPrefs(conversation_tools=False))
    assert session.run("go", timeout=30).last_assistant_message == "On my own, then."
    events = runtime.store.read(session.session_id)
    offered = [
        tool["function"]["name"] for r in server.requests for tool in r.body.get("tools", ())
    ]
    assert not any(name.startswith("conv_") for name in offered)
    answers = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert [(a.outcome, a.output) for a in answers] == [
        ("refused", f"unknown tool {name!r}: it is not offered here")
        for name in ("conv_create", "conv_list")
    ]
    assert sum(isinstance(e.body, ConversationOpened) for e in events) == 1  # the root's
    runtime.close()
    replayed(tmp_path, session.session_id)


def test_destroy_rules(server: ScriptedModelServer, runtime: Runtime) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="make another")]),
        Step(tool_calls=[call("conv_create", user_instruction="work slowly")]),
        Step(text="slow " * 300, chunk_chars=5, chunk_delay=0.01),
    )
    session = runtime.start_session()
    root = session.root_conversation_id
    with session.subscribe() as feed:
        session.submit("nest")
        inner = first_delta_outside(feed, root).conversation_id
        middle = next(c.id for c in session.conversations() if c.id not in (root, inner))
        # The middle conversation waits for the inner one's answer: it may not go.
        waiting = {"ok": False, "reason": f"conversation {middle} is waiting in the current chain"}
        assert session.destroy(middle) == waiting
        assert session.destroy(root) == {
            "ok": False,
            "reason": "the root conversation cannot be destroyed",
        }
        assert session.destroy("nope") == {"ok": False, "reason": "conversation not found"}
        session.interrupt()
        wait_for(feed, lambda e: isinstance(e.body, TurnAborted) and e.conversation_id == inner)
    assert_histories_valid(runtime.store.read(session.session_id))


def test_destroying_a_running_conversation_interrupts_it(
    server: ScriptedModelServer, runtime: Runtime
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="stream a lot")]),
        Step(text="tick " * 300, chunk_chars=5, chunk_delay=0.01),
        Step(text="the helper was destroyed"),
    )
    session = runtime.start_session()
    root = session.root_conversation_id
    with session.subscribe() as feed:
        session.submit("go")
        delta = first_delta_outside(feed, root)
        assert session.destroy(delta.conversation_id) == {"ok": True}
        done = wait_for(
            feed, lambda e: type(e.body).__name__ == "TaskCompleted" and e.conversation_id == root
        )
    events = runtime.store.read(session.session_id)
    helper_kinds = kinds(events, delta.conversation_id)
    assert "TurnAborted" in helper_kinds and helper_kinds[-1] == "ConversationDestroyed"
    [aborted] = [
        e.body
        for e in events
        if isinstance(e.body, TurnAborted) and e.conversation_id == delta.conversation_id
    ]
    assert (aborted.reason, aborted.cause) == ("interrupted", "destroy")
    answer = next(
        e.body
        for e in events
        if isinstance(e.body, ToolCallCompleted) and e.conversation_id == root
    )
    assert json.loads(str(answer.output))["last_assistant_message"] is None
    assert done.seq > 0
    assert [c.id for c in session.conversations()] == [root]


def test_base_instruction_file_is_read_inside_the_workdir_only(
    server: ScriptedModelServer, runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "helper.md").write_text("You are the file-configured helper.")
    (tmp_path.parent / "outside.md").write_text("secret")
    server.push(
        Step(
            tool_calls=[
                call("conv_create", user_instruction="x", base_instruction_file="../outside.md"),
                call("conv_create", user_instruction="x", base_instruction_file="missing.md"),
                call("conv_create", user_instruction="hello", base_instruction_file="helper.md"),
            ]
        ),
        Step(text="configured"),
        Step(text="done"),
    )
    session = runtime.start_session()
    assert session.run("go", timeout=30).ok
    first, second = outputs(runtime, session)[:2]
    assert "outside the working directory" in first["reason"]
    assert "cannot read base_instruction_file 'missing.md'" in second["reason"]
    assert server.requests[1].messages[0] == {
        "role": "system",
        "content": "You are the file-configured helper.",
    }
    # The replay reads what the log says was read, not the files: they may be gone.
    (tmp_path / "helper.md").write_text("Changed since.")
    (tmp_path.parent / "outside.md").unlink()
    replayed = replay(runtime.store, session.session_id, timeout=10)
    assert replayed.ok, replayed.divergence and replayed.divergence.message()
    (tmp_path / "helper.md").unlink()
    assert replay(runtime.store, session.session_id, timeout=10).ok


async def test_the_async_api(server: ScriptedModelServer, runtime: Runtime) -> None:
    server.push(Step(text="async answer"))
    session = runtime.start_session()
    outcome = await session.arun("hi", timeout=30)
    assert outcome.ok and outcome.last_assistant_message == "async answer"


def test_close_cancels_a_running_task_and_is_idempotent(
    server: ScriptedModelServer, runtime: Runtime
) -> None:
    server.push(Step(text="long " * 400, chunk_chars=5, chunk_delay=0.01))
    session = runtime.start_session()
    with session.subscribe() as feed:
        session.submit("talk")
        while not isinstance(feed.get(timeout=10), AgentMessageDelta):
            pass
    session.close(timeout=10)
    session.close()
    events = runtime.store.read(session.session_id)
    # The cut-off request still counts, estimated; then the close.
    kinds = [type(e.body).__name__ for e in events][-3:]
    assert kinds == ["TurnAborted", "TokensCounted", "SessionClosed"]
    assert isinstance(events[-1].body, SessionClosed)
    server.wait_for_disconnects(1, timeout=10)
