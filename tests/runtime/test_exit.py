"""A program that ends without ``Runtime.close()`` exits, and leaves its sessions for the
next process to continue at once (docs/processes.md#a-program-that-ends-without-close).

Each test runs a real script in a ``python`` subprocess on a SQLite file and a scripted model
server of the test's; the script never closes its runtime. A hang fails the test by its
timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from scripted import assert_histories_valid, call, runtime_for

from plait.events import EventStore, SqliteStore, TaskCompleted, TaskStarted, TurnAborted
from plait.replay import replay
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"

EXIT_SEC = 30.0
"""How long a script may take to exit before the test calls it a hang."""
PROMPT_SEC = 10.0
"""How soon after its last line it must have exited ("within a few seconds"): the hand-back
takes about a second; Python's own tear-down of what it imported (openai, pydantic) takes
one more unloaded, up to three on a loaded 2-core machine."""
LEASE_SEC = 60.0

SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from pathlib import Path
    from plait.actors.mcp._config import McpServerConfig
    from plait.actors._model import ModelSettings
    from plait.events import ModelRequested
    from plait.runtime import Runtime, RuntimeSettings

    hanging = threading.Event()

    def hang() -> str:
        \"""Never return.\"""
        hanging.set()
        threading.Event().wait()
        return "never"

    db, base_url, how, server_py = sys.argv[1:5]
    mcp = {"t": McpServerConfig(command=sys.executable, args=[server_py, "stdio"])}
    runtime = Runtime(
        db,
        RuntimeSettings(
            model=ModelSettings(base_url=base_url, api_key="k", model="scripted-model"),
            lease_sec=60,
            mcp_servers=mcp if how == "mcp" else {},
            tools=[hang] if how == "tool" else (),
        ),
    )
    session = runtime.start_session()
    print(session.session_id, flush=True)
    assert session.run("first", timeout=60).ok
    if how == "stream":  # it ends while the model streams its reply
        with session.subscribe() as feed:
            task = session.submit("second")
            for item in feed:
                if getattr(item, "task_id", None) == task and isinstance(item.body, ModelRequested):
                    break
    if how == "tool":  # it ends while a function tool hangs
        session.submit("second")
        assert hanging.wait(60)
    if how == "mcp":  # its MCP server, a child of this process
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if int(parent) == os.getpid() and state != "Z":
                print(stat.parent.name, flush=True)
    print("the end", flush=True)
    """
)


def run_script(db: Path, server: ScriptedModelServer, how: str) -> tuple[str, list[str], float]:
    """Run the script to its end; return its session, the lines it printed after the id, and
    how long it took to exit after its last line."""
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(db), server.base_url, how, str(SERVER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        while (line := process.stdout.readline()) and line != "the end\n":
            lines.append(line.strip())
        ended = time.monotonic()
        try:
            out, err = process.communicate(timeout=EXIT_SEC)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the script still runs {EXIT_SEC} s after its end") from None
    finally:
        if process.returncode is None:
            process.kill()
            process.communicate()
    took = time.monotonic() - ended
    assert process.returncode == 0, err
    assert out == "" and err == "", (out, err)  # nothing to say at exit
    assert lines, err
    return lines[0], lines[1:], took


def assert_clean(store: EventStore, session_id: str) -> None:
    """The log verifies and replays clean, and its histories are valid chat."""
    assert store.verify(session_id).ok
    result = replay(store, session_id, timeout=10)
    assert result.ok, result.divergence and result.divergence.message()
    assert_histories_valid(store.read(session_id))


def hang() -> str:
    """Never return."""
    raise AssertionError("the script's tool: a session offers it again when it resumes")


def resume_at_once(runtime: Runtime, session_id: str, tools: list[Any] | None = None) -> None:
    """Resume the session (offering the script's ``tools``) and run a task in it, at once: the
    lease is free, so it is not followed until the lease lapses."""
    session = runtime.resume(session_id, tools=tools or ())
    assert not session.followed  # the lease was free: no wait for it to lapse
    outcome = session.run("are you there?", timeout=LEASE_SEC / 2)
    assert outcome.ok and outcome.last_assistant_message == "still here"


def test_a_script_that_never_closes_its_runtime_exits_and_its_session_resumes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "plait.db"
    with ScriptedModelServer([Step(text="hello"), Step(text="still here")]) as server:
        session_id, _, took = run_script(db, server, "idle")
        assert took < PROMPT_SEC
        with SqliteStore(db) as store:
            lease = store.leases.get(session_id)
            assert lease is not None and lease.owner is None  # handed back, not left to lapse
        with runtime_for(server, tmp_path, lease_sec=LEASE_SEC) as runtime:
            resume_at_once(runtime, session_id)
            assert_clean(runtime.store, session_id)


@pytest.mark.parametrize("how", ["stream", "tool"])
def test_a_script_that_ends_while_a_task_runs_exits_and_the_cut_task_ends(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "plait.db"
    cut = {
        "stream": Step(text="slow " * 200, chunk_chars=5, chunk_delay=0.1),  # 20 s
        "tool": Step(tool_calls=[call("hang")]),  # a function tool that never returns
    }[how]
    with ScriptedModelServer([Step(text="hello"), cut, Step(text="still here")]) as server:
        session_id, _, took = run_script(db, server, how)
        assert took < PROMPT_SEC
        with runtime_for(server, tmp_path, lease_sec=LEASE_SEC) as runtime:
            tools = [hang] if how == "tool" else []
            resume_at_once(runtime, session_id, tools)
            events = runtime.store.read(session_id)
            assert_clean(runtime.store, session_id)
    started = [e.task_id for e in events if isinstance(e.body, TaskStarted)]
    ended = [e for e in events if isinstance(e.body, TaskCompleted | TurnAborted)]
    assert len(started) == 3 and [e.task_id for e in ended] == started
    aborted = ended[1].body
    assert isinstance(aborted, TurnAborted) and aborted.cause  # its end, with its cause


def test_a_script_that_never_closes_leaves_no_mcp_server_running(tmp_path: Path) -> None:
    db = tmp_path / "plait.db"
    script = [Step(tool_calls=[call("t__echo", text="hi")]), Step(text="echoed")]
    with ScriptedModelServer(script) as server:
        session_id, children, took = run_script(db, server, "mcp")
        assert took < PROMPT_SEC
        pids = [int(pid) for pid in children]
        assert len(pids) == 1  # its MCP server
        for pid in pids:  # stopped and reaped by the script before it exited
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            raise AssertionError(f"MCP server {pid} still runs after its program ended")
    with SqliteStore(db) as store:
        lease = store.leases.get(session_id)
        assert lease is not None and lease.owner is None
