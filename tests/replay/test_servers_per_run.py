"""Replay offers each run of a session the MCP servers and tools that run had.

A session resumed with servers added or removed, or passivated and woken again, replays clean:
the log says which servers each run offered (``McpServersOffered``), and the replay follows it
(docs/replay.md#mcp-servers-per-run). Every server is the test MCP server, the module's, over
streamable HTTP (``mcp_url``): the runs differ by the servers they are given, by name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scripted import call, crash, runtime_for

from plait.actors.mcp import McpServerConfig
from plait.events import (
    McpServersOffered,
    ModelRequested,
    SqliteStore,
    ToolCallCompleted,
    ToolCallStarted,
)
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def server_at(url: str) -> McpServerConfig:
    """The repository's test MCP server (its tools are ``echo``, ``add``...) at ``url``."""
    return McpServerConfig(url=url)


def offered(request_tools: list[dict[str, object]] | None) -> set[str]:
    """The servers whose tools a model request offered (by their ``server__`` prefix)."""
    names = [str(tool["function"]["name"]) for tool in request_tools or []]  # type: ignore[index]
    return {name.split("__", 1)[0] for name in names if "__" in name}


def replay_cli(store_path: Path, session_id: str) -> subprocess.CompletedProcess[str]:
    """``plait replay SESSION --json`` in a child process, on the SQLite file ``store_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
    return subprocess.run(
        [sys.executable, "-m", "plait", "replay", "--store", str(store_path), session_id, "--json"],
        cwd=store_path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_session_resumed_with_servers_added_and_removed_replays_clean(
    tmp_path: Path, mcp_url: str
) -> None:
    script = [
        Step(tool_calls=[call("a__echo", text="one")]),
        Step(text="a answered"),
        Step(tool_calls=[call("a__echo", text="two"), call("b__add", a=2, b=3)]),
        Step(text="both answered"),
        Step(tool_calls=[call("b__echo", text="three")]),
        Step(text="b answered"),
    ]
    runs = [
        {"a": server_at(mcp_url)},
        {"a": server_at(mcp_url), "b": server_at(mcp_url)},
        {"b": server_at(mcp_url)},
    ]
    session_id = ""
    with ScriptedModelServer(script) as server:
        for number, servers in enumerate(runs):
            with runtime_for(server, tmp_path, mcp_servers=servers) as runtime:
                session = runtime.resume(session_id) if session_id else runtime.start_session()
                session_id = session.session_id
                assert session.run(f"run {number}", timeout=90).ok
                session.close()
        requests = server.requests
    # What the model was offered followed each run's servers: A, then A and B, then B alone.
    assert [offered(r.tools) for r in requests] == [{"a"}] * 2 + [{"a", "b"}] * 2 + [{"b"}] * 2
    with SqliteStore(tmp_path / "plait.db") as store:
        events = store.read(session_id)
        said = [e.body.servers for e in events if isinstance(e.body, McpServersOffered)]
        assert said == [["a", "b"], ["b"]]  # the first run's are in SessionStarted.settings
        outputs = [e.body.output for e in events if isinstance(e.body, ToolCallCompleted)]
        assert outputs == ["one", "two", "5", "three"]
        hashes = [e.body.tools_sha256 for e in events if isinstance(e.body, ModelRequested)]
        assert len(set(hashes)) == 3
        result = replay(store, session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()
        assert result.events == result.total == len(events)
    replayed = replay_cli(tmp_path / "plait.db", session_id)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["events"] == report["total"] == len(events), report


def test_sessions_passivated_and_woken_with_a_server_replay_clean(
    tmp_path: Path, mcp_url: str
) -> None:
    rounds = 2
    script = []
    for number in range(rounds * 2):
        script += [Step(tool_calls=[call("t__echo", text=f"call {number}")]), Step(text="ok")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server, tmp_path, mcp_servers={"t": server_at(mcp_url)}, max_active_sessions=1
        ) as runtime,
    ):
        # One place for two sessions: each task wakes its session and passivates the other.
        first, second = runtime.start_session(), runtime.start_session()
        for number in range(rounds):
            for session, other in ((first, second), (second, first)):
                assert session.run(f"round {number}", timeout=90).ok
                assert other.passive
        ids = [first.session_id, second.session_id]
    with SqliteStore(tmp_path / "plait.db") as store:
        for session_id in ids:
            events = store.read(session_id)
            outputs = [e.body.output for e in events if isinstance(e.body, ToolCallCompleted)]
            assert len(outputs) == rounds
            # The same servers every time: no run had anything new to say of them.
            assert not any(isinstance(e.body, McpServersOffered) for e in events)
            result = replay(store, session_id, timeout=10)
            assert result.ok, result.divergence and result.divergence.message()
            assert result.events == result.total == len(events)


def test_a_session_taken_over_with_a_server_added_replays_clean(
    tmp_path: Path, mcp_url: str
) -> None:
    # A task is cut off by a crash with another waiting; the process that takes the session
    # over has one more server, which the waiting task uses.
    with ScriptedModelServer([Step(tool_calls=[call("a__slow", seconds=0.5)])]) as server:
        runtime = runtime_for(server, tmp_path, mcp_servers={"a": server_at(mcp_url)})
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("cut off")
            session.submit("waiting")
            event = feed.get(timeout=60)
            while event is not None and not isinstance(event.body, ToolCallStarted):
                event = feed.get(timeout=60)
            assert event is not None, "the call never started"
        crash(runtime, session)  # the process dies: nothing more is recorded
    script = [
        Step(tool_calls=[call("b__echo", text="from b")]),
        Step(text="waited, then used b"),
        Step(text="and once more"),
    ]
    servers = {"a": server_at(mcp_url), "b": server_at(mcp_url)}
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, mcp_servers=servers) as runtime,
    ):
        assert runtime.resume(session.session_id).run("once more", timeout=90).ok
        requests = server.requests
    assert [offered(r.tools) for r in requests] == [{"a", "b"}] * 3
    with SqliteStore(tmp_path / "plait.db") as store:
        events = store.read(session.session_id)
        kinds = [type(e.body).__name__ for e in events]
        at = kinds.index("McpServersOffered")
        assert kinds[at + 1] == "SessionResumed"  # the new process's first deed
        outputs = [e.body.output for e in events if isinstance(e.body, ToolCallCompleted)]
        assert outputs == ["slept 0.5s", "from b"]  # the cut-off call ran again
        result = replay(store, session.session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()
        assert result.events == result.total == len(events)
