"""Replay runs the same actors answered from the log, and names the first difference."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest
from scripted import call, random_script, record_session

from plait import DivergenceError
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    Event,
    McpServerReady,
    ModelRequested,
    SessionStarted,
    SqliteStore,
    TurnAborted,
)
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

SESSIONS = itertools.count(1)


def live(store: SqliteStore, script: list[Step], prompts: list[str], **runtime: object) -> str:
    """Run ``prompts`` in one session against ``script``; return the session id."""
    settings = {"backoff_sec": 0.001, "max_attempts": 2}
    return record_session(store, script, prompts, f"s{next(SESSIONS)}", settings, **runtime)


def test_random_sessions_replay_without_a_difference(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = SqliteStore(tmp_path / "random.db")
    for number in range(20):
        session = live(store, random_script(rng), [f"session {number}", "and again"])
        result = replay(store, session, timeout=5)
        assert result.ok, result.divergence and result.divergence.message()
        assert result.events == result.total == len(store.read(session))
    store.close()


def test_replaying_one_log_ten_times_gives_one_result(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "one.db")
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="look into it")]),
        Step(tool_calls=[call("conv_list")]),
        Step(text="found three"),
        Step(text="the helper found three"),
    ]
    session = live(store, script, ["delegate"])
    results = {replay(store, session) for _ in range(10)}
    assert len(results) == 1 and results.pop().ok
    store.close()


def test_a_changed_program_is_reported_at_the_first_difference(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "changed.db")
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="look into it")]),
        Step(text="done"),
        Step(text="root done"),
    ]
    session = live(store, script, ["delegate"])
    recorded = store.read(session)
    replaced = next(e for e in recorded if isinstance(e.body, TurnAborted))
    # The same log, replayed by a program whose interrupt chains may not nest at all.
    result = replay(store, session, max_interrupt_chain_depth=0, timeout=2)
    assert not result.ok and result.divergence is not None
    divergence = result.divergence
    assert divergence.seq == replaced.seq - 1  # where the log answered the call with a task
    assert divergence.expected.startswith("ConversationOpened")
    assert divergence.got.startswith("ToolCallCompleted")
    assert divergence.fields["type"] == ["ConversationOpened", "ToolCallCompleted"]
    assert f"session {session} seq {divergence.seq}" in divergence.message()
    with pytest.raises(DivergenceError, match=f"seq {divergence.seq}"):
        replay(store, session, max_interrupt_chain_depth=0, timeout=2, raise_on_divergence=True)
    store.close()


def test_interrupts_destroys_and_model_errors_replay(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "inputs.db")
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="help")]),
        Step(text="helped"),
        Step(text="root done"),
        Step(text="slow answer", chunk_chars=1, chunk_delay=0.05),
        Step(status=503),
        Step(status=503),
        Step(status=503),  # the third attempt fails too: the task fails
        Step(text="after the errors"),
    ]
    counter = itertools.count(1)
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="test", backoff_sec=0.001)
        with Runtime(
            store, RuntimeSettings(model=settings, new_id=lambda: f"id-{next(counter)}")
        ) as runtime:
            session = runtime.start_session()
            assert session.run("delegate", timeout=60).ok
            with session.subscribe() as feed:
                session.submit("talk slowly")
                while (item := feed.get(timeout=30)) is not None:
                    if not isinstance(item, Event):  # the first text delta
                        session.interrupt()
                    elif isinstance(item.body, TurnAborted):
                        break
            helper = next(
                c.id for c in session.conversations() if c.id != session.root_conversation_id
            )
            assert session.destroy(helper)["ok"]
            assert session.run("fail twice", timeout=60).status == "model_error"
            assert session.run("once more", timeout=60).ok
            session.close()
    result = replay(store, session.session_id, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()
    store.close()


def test_mcp_sessions_replay_with_no_server_running(tmp_path: Path) -> None:
    server_py = Path(__file__).parents[1] / "mcp" / "server.py"
    config = McpServerConfig(command=sys.executable, args=[str(server_py), "stdio"])
    meet = call("t__rendezvous", count=2)
    script = [
        Step(tool_calls=[meet, meet]),  # read-only: together
        Step(tool_calls=[call("t__note", key="k", text="v"), call("t__echo", text="e")]),
        Step(tool_calls=[call("t__crash")]),  # the server dies and is restarted
        Step(tool_calls=[call("t__image"), call("t__nope")]),
        Step(text="all done"),
    ]
    store = SqliteStore(tmp_path / "mcp.db")
    session = live(store, script, ["use the tools"], mcp_servers={"t": config})
    recorded = store.read(session)
    restarts = [e.body.attempt for e in recorded if isinstance(e.body, McpServerReady)]
    assert restarts == [1, 2]
    result = replay(store, session, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()
    assert result.events == len(recorded)
    store.close()


def test_the_program_is_configured_as_the_session_recorded(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "settings.db")
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="look into it")]),
        Step(text="refused, so I answer myself"),
    ]
    session = live(store, script, ["delegate"], max_interrupt_chain_depth=0)
    started = store.read(session)[0].body
    assert isinstance(started, SessionStarted) and started.settings is not None
    assert started.settings.max_interrupt_chain_depth == 0
    assert replay(store, session, timeout=2).ok  # no argument needed: the log says it
    assert not replay(store, session, timeout=2, max_interrupt_chain_depth=8).ok
    store.close()


def test_a_session_resumed_with_another_model_name_replays(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "renamed.db")
    first = live(store, [Step(text="from a")], ["one"])
    with ScriptedModelServer([Step(text="from b")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="test", model="model-b")
        with Runtime(store, RuntimeSettings(model=settings)) as runtime:
            runtime.resume(first).run("two", timeout=30)
    events = store.read(first)
    requested = [e.body.model for e in events if isinstance(e.body, ModelRequested)]
    assert len(set(requested)) == 2  # the names differ: configuration, not a decision
    result = replay(store, first, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()
    store.close()
