"""Changing a live conversation's context (docs/conversations.md#context-changes): recorded,
applied from the next task's first turn, never between a call and its answer, and replayed."""

from __future__ import annotations

import itertools
from pathlib import Path

from scripted import assert_histories_valid, call, local_mcp_servers, runtime_for

from plait.actors._turn import DEFAULT_INSTRUCTIONS
from plait.events import (
    AgentMessageDelta,
    ConversationContextChanged,
    Event,
    SqliteStore,
    TaskCompleted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def test_a_context_change_applies_from_the_next_task_and_replays(tmp_path: Path) -> None:
    script = [
        Step(text="one"),
        Step(text="two " * 100, chunk_chars=4, chunk_delay=0.01),
        Step(text="three"),
        Step(text="four"),
    ]
    ids = itertools.count(1)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, new_id=lambda: f"id-{next(ids)}") as runtime,
    ):
        session = runtime.start_session(base_instructions="Be kind.")
        session.run("first", timeout=30)
        with session.subscribe() as feed:
            running = session.submit("second")
            while not isinstance(item := feed.get(timeout=30), AgentMessageDelta):
                assert item is not None, "the second task never streamed"
            # The second task is streaming: the change waits for it.
            session.change_context(base_instructions="Be terse.", user_instructions="Use lists.")
        assert session.run("third", timeout=30).last_assistant_message == "three"
        session.change_context(clear_history=True)
        assert session.run("fourth", timeout=30).ok
        events = runtime.store.read(session.session_id)
    requests = [r.messages for r in server.requests]
    assert [m[0]["content"] for m in requests] == ["Be kind.", "Be kind.", "Be terse.", "Be terse."]
    # The change came after the running task ended, and its instructions joined the history.
    changed = next(e for e in events if isinstance(e.body, ConversationContextChanged))
    ended = next(e for e in events if e.task_id == running and isinstance(e.body, TaskCompleted))
    assert changed.seq > ended.seq
    assert [m["content"] for m in requests[2][1:]][-2:] == ["Use lists.", "third"]
    assert requests[2][1]["content"] == "first"  # nothing earlier moved
    # Cleared: the fourth request holds the instructions, the rebuild note and its input only.
    assert [m["role"] for m in requests[3]] == ["system", "user", "user"]
    assert requests[3][-1]["content"] == "fourth"
    assert_histories_valid(events)
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session.session_id, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()


def test_a_change_of_one_conversation_leaves_the_others_alone(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="help")]),
        Step(text="helped"),
        Step(text="thanks"),
        Step(tool_calls=[call("conv_send", conversation_id="id-4", text="again")]),
        Step(text="helped again"),
        Step(text="thanks again"),
    ]
    ids = itertools.count(1)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, new_id=lambda: f"id-{next(ids)}") as runtime,
    ):
        session = runtime.start_session(base_instructions="Lead.")
        assert session.run("delegate", timeout=30).ok
        helper = next(c.id for c in session.conversations() if c.id != session.root_conversation_id)
        assert helper == "id-4"
        session.change_context(helper, base_instructions="Assist.")
        assert session.run("delegate again", timeout=30).ok
    systems = [r.messages[0]["content"] for r in server.requests]
    # root, helper (inherited Lead.), root, root, helper (changed), root
    assert systems == ["Lead.", "Lead.", "Lead.", "Lead.", "Assist.", "Lead."]


def test_an_allowlist_that_names_no_tool_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    with ScriptedModelServer() as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            task = session.change_context(mcp_allowlist=["nope__tool"])
            while not (isinstance(item := feed.get(timeout=30), Event) and item.task_id == task
                       and isinstance(item.body, TurnAborted)):  # fmt: skip
                assert item is not None, "the change never ended"
        events = runtime.store.read(session.session_id)
    assert isinstance(item.body, TurnAborted) and item.body.reason == "failed"
    assert "this session has no MCP servers" in item.body.detail
    assert not any(isinstance(e.body, ConversationContextChanged) for e in events)


def test_without_base_instructions_a_conversation_falls_back_to_the_default(
    tmp_path: Path,
) -> None:
    script = [Step(text="one"), Step(text="two"), Step(text="three")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        session.run("first", timeout=30)
        session.change_context(base_instructions="Be terse.")
        session.run("second", timeout=30)
        session.change_context(base_instructions=None)  # back to the default
        session.run("third", timeout=30)
    systems = [r.messages[0]["content"] for r in server.requests]
    assert systems == [DEFAULT_INSTRUCTIONS, "Be terse.", DEFAULT_INSTRUCTIONS]


CONTROL_SERVER = local_mcp_servers("--variant", "control")
"""The test MCP server with ``replan``, whose result carries a ``plait/context`` signal."""


def test_a_tool_result_may_change_the_context_from_the_next_turn(tmp_path: Path) -> None:
    change = {
        "base_instructions": "Now build.",
        "clear_history": True,
        "user_instructions": "Todo: a, b.",
    }
    script = [
        Step(text="Earlier.", tool_calls=[]),
        Step(text="Planned.", tool_calls=[call("t__replan", change=change)]),
        Step(text="Building a."),
        Step(text="Done."),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, mcp_servers=CONTROL_SERVER) as runtime,
    ):
        session = runtime.start_session(base_instructions="Plan first.")
        session.run("hello", timeout=60)
        assert session.run("plan it", timeout=60).last_assistant_message == "Building a."
        session.run("go on", timeout=60)
        events = runtime.store.read(session.session_id)
    # The turn that made the call was the old context's; the next turn, in the same task,
    # the new one's: new instructions, and a history rebuilt from the rebuild message.
    systems = [r.messages[0]["content"] for r in server.requests]
    assert systems == ["Plan first.", "Plan first.", "Now build.", "Now build."]
    assert [m["content"] for m in server.requests[2].messages[1:]] == [
        "[context rebuilt: history cleared]",
        "Todo: a, b.",
    ]
    (changed,) = [e for e in events if isinstance(e.body, ConversationContextChanged)]
    answered = next(e for e in events if isinstance(e.body, ToolCallCompleted))
    assert changed.seq == answered.seq + 1 and changed.task_id == answered.task_id
    assert answered.body.control is not None and answered.body.control.clear_history
    assert_histories_valid(events)
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session.session_id, timeout=10)
    assert result.ok, result.divergence and result.divergence.message()


def test_a_malformed_control_signal_is_an_error_the_model_sees(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("t__replan", change={"base": "x"})]), Step(text="Oh.")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, mcp_servers=CONTROL_SERVER) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("plan it", timeout=60).ok
        events = runtime.store.read(session.session_id)
    answered = next(e.body for e in events if isinstance(e.body, ToolCallCompleted))
    assert answered.outcome == "error" and answered.control is None
    assert "malformed plait/context control signal" in str(answered.output)
    assert "base" in str(answered.output)
    assert not any(isinstance(e.body, ConversationContextChanged) for e in events)
    assert server.requests[1].messages[0]["content"] != "x"
