"""``kill -9`` a process in the middle of a session; the next one recovers it.

A child process runs a scripted session (a scripted model, the test MCP server) on a SQLite
file; the parent follows the file and kills the child with SIGKILL at a chosen event. Then it
reopens the store: nothing acknowledged lost, no half-written group, the chain intact, the
running task ended ``crashed``, every open call answered (a read-only one by running it
again), and the session goes on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scripted import assert_histories_valid

from plait.actors import McpLimits, ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ModelRequested,
    TaskCompleted,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.stores import SqliteStore
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._recovery import NOT_SENT
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"
MCP = {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])}
LIMITS = McpLimits(per_session=1)  # the child's, and the process that recovers it

CHILD = textwrap.dedent(
    """
    import itertools, json, sys
    from plait.actors.mcp import McpServerConfig
    from plait.actors._model import ModelSettings
    from plait.actors._pool import McpLimits
    from plait.runtime import Runtime, RuntimeSettings
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    db, server_py, case = sys.argv[1:4]
    slow = ScriptedToolCall("t__slow", json.dumps({"seconds": 1.5}))
    echo = ScriptedToolCall("t__echo", json.dumps({"text": "hi"}))
    script = {
        "mid-stream": [Step(text="x" * 400, chunk_chars=1, chunk_delay=0.05)],
        "mid-call": [Step(tool_calls=[slow])],
        "queued-call": [Step(tool_calls=[slow, echo])],
        "queued-task": [Step(tool_calls=[slow])],
    }[case]
    ids = itertools.count(1)
    mcp = {"t": McpServerConfig(command=sys.executable, args=[server_py, "stdio"])}
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        runtime = Runtime(
            db,
            RuntimeSettings(
                model=settings, mcp_servers=mcp, mcp_limits=McpLimits(per_session=1),
                new_id=lambda: f"id-{next(ids)}", lease_sec=1.0,  # it dies: its lease lapses soon
            ),
        )
        session = runtime.start_session()
        if case == "queued-task":
            session.submit("work")  # runs first; "later" waits behind it
        session.run("later" if case == "queued-task" else "work", timeout=120)
    """
)

KILL_AT = {
    "mid-stream": ModelRequested,
    "mid-call": ToolCallStarted,
    "queued-call": ToolCallStarted,
    "queued-task": ToolCallStarted,
}


SLEPT = ("slept 1.5s", "ok")
"""A read-only call the crash cut off runs again on resume (``test_rerun.py`` has the rest)."""


def crash(tmp_path: Path, case: str) -> Path:
    """Run the child until the case's event is in the log, then SIGKILL it."""
    db = tmp_path / "crash.db"
    SqliteStore(db).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(SERVER), case], start_new_session=True
    )
    try:
        with SqliteStore(db) as store, store.subscribe() as tail:
            while (event := tail.get(timeout=60)) is not None:
                if isinstance(event.body, KILL_AT[case]):
                    break
            assert event is not None, "the child never reached the point to kill it at"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the child and its MCP server, at once
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return db


@pytest.mark.parametrize("case", ["mid-stream", "mid-call", "queued-call", "queued-task"])
def test_a_killed_session_is_recovered_and_goes_on(tmp_path: Path, case: str) -> None:
    db = crash(tmp_path, case)
    with SqliteStore(db) as store:
        before = store.read("id-1")
        assert store.verify("id-1").ok
        with ScriptedModelServer([Step(text="back again"), Step(text="and again")]) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
            with Runtime(
                store, RuntimeSettings(model=settings, mcp_servers=MCP, mcp_limits=LIMITS)
            ) as runtime:
                session = runtime.resume("id-1")
                after = session.run("are you there?", timeout=60)
        events = store.read("id-1")
        assert store.verify("id-1").ok
    # A task that waited behind the crashed one runs first, then the new one.
    queued = case == "queued-task"
    assert after.last_assistant_message == ("and again" if queued else "back again")
    completed = [e.task_id for e in events[len(before) :] if isinstance(e.body, TaskCompleted)]
    assert len(completed) == (2 if queued else 1)
    recovered = events[len(before) :]
    aborted = next(e.body for e in recovered if isinstance(e.body, TurnAborted))
    assert aborted.reason == "crashed"
    answers = [
        (e.body.output, e.body.outcome) for e in recovered if isinstance(e.body, ToolCallCompleted)
    ]
    assert (
        answers
        == {
            "mid-stream": [],
            "mid-call": [SLEPT],
            "queued-call": [SLEPT, (NOT_SENT, "error")],
            "queued-task": [SLEPT],
        }[case]
    )
    assert isinstance(events[-2].body, TaskCompleted)  # then the close
    assert_histories_valid(events)
    with SqliteStore(db) as store:  # and the session replays, across its crash
        result = replay(store, "id-1", timeout=5)  # with the limits the session recorded
        assert result.ok, result.divergence and result.divergence.message()
