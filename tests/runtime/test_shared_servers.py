"""A runtime's MCP servers are shared by its sessions and started when first needed.

Every server here is the repository's test MCP server over stdio, with a name of the test's
own on its command line, so that its processes (children of this process) can be counted.
What each session records of a shared server (its start, a change of its tools, its restart)
is in its own log, and replays clean (docs/tools.md#shared-servers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from scripted import call, runtime_for
from support import wait_for_event

from plait.actors.mcp import McpServerConfig
from plait.events import (
    EventStore,
    McpServerFailed,
    McpServerReady,
    McpToolsRefreshed,
    ModelRequested,
    SqliteStore,
    ToolCallCompleted,
    ToolCallStarted,
)
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step

B = TypeVar("B")
SERVER = Path(__file__).parents[1] / "mcp" / "server.py"
WAIT = 60


@pytest.fixture
def tag() -> str:
    """A word on the command line of this test's server processes, and only theirs."""
    return f"shared-{uuid.uuid4().hex[:8]}"


def stdio(tag: str, name: str, variant: str = "a", **config: object) -> McpServerConfig:
    """The test MCP server over stdio, its processes known by ``tag`` and ``name``."""
    args = [str(SERVER), "stdio", "--name", f"{tag}-{name}", "--variant", variant]
    return McpServerConfig(command=sys.executable, args=args, **config)  # type: ignore[arg-type]


def processes(tag: str) -> dict[str, int]:
    """How many of this process's children run a server of ``tag``, by server name."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # it ended meanwhile
        words = [arg.decode(errors="replace") for arg in argv]
        named = [w.removeprefix(f"{tag}-") for w in words if w.startswith(f"{tag}-")]
        if parent == os.getpid() and named:
            found[named[0]] = found.get(named[0], 0) + 1
    return found


def replays_clean(store: EventStore, *sessions: str) -> None:
    for session_id in sessions:
        result = replay(store, session_id, timeout=WAIT)
        assert result.ok, result.divergence and result.divergence.message()
        assert result.events == result.total


def bodies(store: EventStore, session_id: str, kind: type[B]) -> list[B]:
    """The bodies of ``kind`` in the session's log, in order."""
    return [e.body for e in store.read(session_id) if isinstance(e.body, kind)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore(tmp_path / "plait.db") as opened:
        yield opened


def test_sixty_four_sessions_share_one_process_per_server(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    servers = {"a": stdio(tag, "a"), "b": stdio(tag, "b")}
    with ScriptedModelServer([Step(text="ok")] * 64) as model:
        with runtime_for(model, tmp_path, store=store, mcp_servers=servers) as runtime:
            sessions = [runtime.start_session() for _ in range(64)]
            for session in sessions:
                assert session.run("hi", timeout=WAIT).ok
            assert not any(session.passive for session in sessions)
            assert processes(tag) == {"a": 1, "b": 1}
            # Each session's first request offered both servers' tools, and says so in its log.
            for session in sessions:
                ready = bodies(store, session.session_id, McpServerReady)
                assert sorted(b.server for b in ready) == ["a", "b"]
            offered = {
                b.tools_sha256
                for s in sessions
                for b in bodies(store, s.session_id, ModelRequested)
            }
            assert len(offered) == 1
        assert processes(tag) == {}  # the runtime's close stopped them


def test_a_server_scoped_to_the_session_runs_once_per_session(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    servers = {"a": stdio(tag, "a", scope="session"), "b": stdio(tag, "b")}
    with (
        ScriptedModelServer([Step(text="ok")] * 3) as model,
        runtime_for(model, tmp_path, store=store, mcp_servers=servers) as runtime,
    ):
        for _ in range(3):
            assert runtime.start_session().run("hi", timeout=WAIT).ok
        assert processes(tag) == {"a": 3, "b": 1}


def first_run(
    model: ScriptedModelServer, tmp_path: Path, store: EventStore, servers: dict[str, Any]
) -> str:
    """Start a session with ``servers`` in a runtime of its own, run a turn, close: its id."""
    with runtime_for(model, tmp_path, store=store, mcp_servers=servers) as runtime:
        session = runtime.start_session()
        assert session.run("start", timeout=WAIT).ok
        return session.session_id


def test_a_resumed_session_starts_a_server_at_its_first_call(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    script = [
        Step(text="first run"),
        Step(text="no tools needed"),
        Step(tool_calls=[call("a__echo", text="now")]),
        Step(text="echoed"),
    ]
    with ScriptedModelServer(script) as model:
        servers = {"a": stdio(tag, "a")}
        session_id = first_run(model, tmp_path, store, servers)
        with runtime_for(model, tmp_path, store=store, mcp_servers=servers) as runtime:
            session = runtime.resume(session_id)
            assert session.run("talk", timeout=WAIT).ok
            assert processes(tag) == {}  # offered from the log: nothing started
            assert session.run("call", timeout=WAIT).ok
            assert processes(tag) == {"a": 1}
    events = store.read(session_id)
    requests = [e.body for e in events if isinstance(e.body, ModelRequested)]
    assert len({r.tools_sha256 for r in requests}) == 1
    # The second run's server started for the call: its start is recorded after the call's.
    started = next(i for i, e in enumerate(events) if isinstance(e.body, ToolCallStarted))
    ready = [i for i, e in enumerate(events) if isinstance(e.body, McpServerReady)]
    assert len(ready) == 2 and ready[1] > started
    assert bodies(store, session_id, ToolCallCompleted)[0].output == "now"
    replays_clean(store, session_id)


def test_a_lazy_server_whose_tools_changed_records_the_change(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    script = [
        Step(text="first run"),
        Step(tool_calls=[call("a__echo", text="now")]),
        Step(text="echoed"),
        Step(text="after"),
    ]
    with ScriptedModelServer(script) as model:
        session_id = first_run(model, tmp_path, store, {"a": stdio(tag, "a", variant="a")})
        later = {"a": stdio(tag, "a", variant="b")}  # its lookup tool takes other arguments
        with runtime_for(model, tmp_path, store=store, mcp_servers=later) as runtime:
            session = runtime.resume(session_id)
            assert session.run("call", timeout=WAIT).ok
            assert session.run("after", timeout=WAIT).ok
    hashes = [b.tools_sha256 for b in bodies(store, session_id, ModelRequested)]
    # The first run's list, offered again until the call started the server; from the next
    # request on, the list it reported.
    assert hashes[0] == hashes[1] != hashes[2] == hashes[3]
    replays_clean(store, session_id)


def test_a_shared_servers_tool_change_and_restart_reach_every_session(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    script = [
        Step(text="ready"),
        Step(text="ready"),
        Step(tool_calls=[call("a__grow")]),
        Step(text="grown"),
        Step(tool_calls=[call("a__extra")]),
        Step(text="extra answered"),
        Step(tool_calls=[call("a__crash")]),
        Step(text="crashed"),
        Step(tool_calls=[call("a__echo", text="back")]),
        Step(text="echoed"),
    ]
    servers = {"a": stdio(tag, "a")}
    with (
        ScriptedModelServer(script) as model,
        runtime_for(model, tmp_path, store=store, mcp_servers=servers) as runtime,
    ):
        one, two = runtime.start_session(), runtime.start_session()
        assert one.run("hi", timeout=WAIT).ok and two.run("hi", timeout=WAIT).ok
        assert one.run("grow", timeout=WAIT).ok
        wait_for_event(store, two.session_id, McpToolsRefreshed, timeout=WAIT)
        assert two.run("use extra", timeout=WAIT).ok  # offered to the other session too
        assert one.run("crash", timeout=WAIT).ok
        for session in (one, two):
            failed = wait_for_event(store, session.session_id, McpServerFailed, timeout=WAIT)
            wait_for_event(store, session.session_id, McpServerReady, after=failed.seq)
        assert two.run("echo", timeout=WAIT).ok
        assert processes(tag) == {"a": 1}
    outputs = [b.output for b in bodies(store, two.session_id, ToolCallCompleted)]
    assert outputs == ["extra", "back"]
    replays_clean(store, one.session_id, two.session_id)


def test_sessions_of_two_processes_on_one_store_each_replay_clean(
    tmp_path: Path, tag: str, store: SqliteStore
) -> None:
    script = [Step(tool_calls=[call("a__echo", text="x")]), Step(text="done")] * 2
    config = stdio(tag, "a")
    with (
        ScriptedModelServer(script) as model,
        runtime_for(model, tmp_path, store=store, mcp_servers={"a": config}) as runtime,
    ):
        here = runtime.start_session()
        assert here.run("echo", timeout=WAIT).ok
        # Another process, its own servers, the same store: ``plait exec`` on its file.
        args = ", ".join(f'"{arg}"' for arg in config.args)
        (tmp_path / "plait.toml").write_text(
            f'[model]\nbase_url = "{model.base_url}"\nmodel = "scripted-model"\n'
            f'[mcp_servers.a]\ncommand = "{sys.executable}"\nargs = [{args}]\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
        argv = [sys.executable, "-m", "plait", "exec", "--store", str(store.path), "--json"]
        there = subprocess.run(
            [*argv, "echo"], cwd=tmp_path, env={**env, "OPENAI_API_KEY": "k"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert there.returncode == 0, there.stderr
        assert processes(tag) == {"a": 1}  # the other process's were its own
    other = json.loads(there.stdout.splitlines()[-1])["session_id"]
    assert bodies(store, other, ToolCallCompleted)[0].output == "x"
    replays_clean(store, here.session_id, other)
