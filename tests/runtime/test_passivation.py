"""Idle sessions are passivated: their actors stop, and come back from the log when needed."""

from __future__ import annotations

import threading
from pathlib import Path

from scripted import call, local_mcp_servers, runtime_for

from plait.events import McpServerReady, SessionClosed
from plait.replay import replay
from plait.runtime import SessionHandle
from plait.testing import ScriptedModelServer, Step


def wait_passive(handle: SessionHandle, timeout: float = 10) -> bool:
    changed = handle.runtime.sessions.hosts[handle.session_id].changed
    with changed:
        return changed.wait_for(lambda: handle.passive, timeout)


def test_passive_sessions_hold_no_threads_and_answer_their_next_task(tmp_path: Path) -> None:
    sessions = 20
    steps = [Step(text="warm"), *(Step(text=f"first {i}") for i in range(sessions))]
    steps += [Step(text=f"second {i}") for i in range(sessions)]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        warm = runtime.start_session()  # the runtime's own threads start with its first call
        assert warm.run("warm up", timeout=30).ok and warm.passivate()
        before = set(threading.enumerate())
        handles = [runtime.start_session() for _ in range(sessions)]
        for i, handle in enumerate(handles):
            assert handle.run(f"one {i}", timeout=30).last_assistant_message == f"first {i}"
        assert all(handle.passivate() for handle in handles)
        for thread in set(threading.enumerate()) - before:
            thread.join(timeout=10)  # the sessions' actor threads end
        assert set(threading.enumerate()) <= before  # what is left is the runtime's, shared
        assert all(handle.passive for handle in handles)
        assert [len(handle.history()) for handle in handles] == [2] * sessions
        assert all(handle.passive for handle in handles)  # reading the log does not wake it
        for i, handle in enumerate(handles):
            outcome = handle.run(f"two {i}", timeout=30)
            assert outcome.last_assistant_message == f"second {i}"
            assert not handle.passive
            assert [m["content"] for m in handle.history()] == [
                f"one {i}",
                f"first {i}",
                f"two {i}",
                f"second {i}",
            ]
        handles[0].passivate()
        handles[0].close()  # a passive session closes without its actors
        events = runtime.store.read(handles[0].session_id)
        assert isinstance(events[-1].body, SessionClosed)
        for handle in handles:
            result = replay(runtime.store, handle.session_id, timeout=10)
            assert result.ok, result.divergence and result.divergence.message()


def test_the_runtime_passivates_a_session_left_idle(tmp_path: Path) -> None:
    steps = [Step(text="hello"), Step(text="again")]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path, idle_sec=0.2) as rt:
        session = rt.start_session()
        assert session.run("hi", timeout=30).ok
        assert wait_passive(session)
        assert session.run("still there?", timeout=30).last_assistant_message == "again"
        assert wait_passive(session)  # and again, once idle
        assert replay(rt.store, session.session_id, timeout=10).ok


def test_a_session_with_work_queued_is_not_passivated(tmp_path: Path) -> None:
    steps = [Step(text="slow " * 100, chunk_chars=5, chunk_delay=0.01)]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("talk")
            while (item := feed.get(timeout=10)) is not None:
                if type(item.body).__name__ == "TurnStarted":  # type: ignore[union-attr]
                    break
            assert not session.passivate()  # a task runs
        assert not session.passive


def test_a_session_with_mcp_servers_restarts_them_and_replays_clean(tmp_path: Path) -> None:
    steps = [
        Step(tool_calls=[call("t__echo", text="a")]),
        Step(text="one"),
        Step(tool_calls=[call("t__echo", text="b")]),
        Step(text="two"),
    ]
    servers = local_mcp_servers()
    with (
        ScriptedModelServer(steps) as server,
        runtime_for(server, tmp_path, mcp_servers=servers) as rt,
    ):
        session = rt.start_session()
        assert session.run("first", timeout=60).last_assistant_message == "one"
        assert session.passivate()
        assert session.run("second", timeout=60).last_assistant_message == "two"
        events = rt.store.read(session.session_id)
        # Its server started again with it: the restart is the one thing it records.
        assert sum(isinstance(e.body, McpServerReady) for e in events) == 2
        result = replay(rt.store, session.session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()


def test_a_session_passivated_and_resumed_many_times_replays_clean(tmp_path: Path) -> None:
    # Each round: a conv_create (ids, a child conversation, a continuation), then passivation.
    rounds = 12
    steps: list[Step] = []
    for i in range(rounds):
        create = call("conv_create", user_instruction=f"child {i}", base_instruction_text="Help.")
        steps += [Step(tool_calls=[create]), Step(text=f"child says {i}"), Step(text=f"done {i}")]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        for i in range(rounds):
            assert session.run(f"round {i}", timeout=30).last_assistant_message == f"done {i}"
            assert session.passivate() and session.passive
        assert len(session.conversations()) == rounds + 1  # read from the log, still passive
        assert session.passive
        result = replay(runtime.store, session.session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()
