"""After a crash, a call that was running is run again if its tool is read-only or idempotent,
and its real result recorded; any other is answered ``unknown`` and never run twice.

The crash here is the session's actors and MCP server stopped with nothing recorded (as the
process dying does); ``test_kill_points.py`` kills real processes.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from scripted import assert_histories_valid, call, crash, runtime_for

from plait.actors.mcp import McpServerConfig
from plait.events import (
    SqliteStore,
    TaskCompleted,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.replay import replay
from plait.runtime._recovery import UNKNOWN
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"


def crash_during(tmp_path: Path, tool_calls: list[object], config: McpServerConfig) -> str:
    """Run a task whose reply makes ``tool_calls``; stop the process's session while they
    run. Return the session id."""
    ids = itertools.count(1)
    servers = {"t": config}
    with ScriptedModelServer([Step(tool_calls=tool_calls)]) as server:
        runtime = runtime_for(
            server,
            tmp_path,
            mcp_servers=servers,
            new_id=lambda: f"id-{next(ids)}",
            expire_every_sec=None,
        )
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("go")
            started = 0
            while started < len(tool_calls):
                event = feed.get(timeout=60)
                assert event is not None, "the calls never started"
                started += isinstance(event.body, ToolCallStarted)
        crash(runtime, session)  # the process dies: nothing more is recorded
    return session.session_id


def resume(tmp_path: Path, session_id: str, config: McpServerConfig) -> list[object]:
    """Resume the session in a new runtime, run one more task; return the events after the
    crash."""
    with SqliteStore(tmp_path / "plait.db") as store:
        before = store.last_seq(session_id)
    with (
        ScriptedModelServer([Step(text="back")]) as server,
        runtime_for(server, tmp_path, mcp_servers={"t": config}) as runtime,
    ):
        after = runtime.resume(session_id).run("are you there?", timeout=60)
        assert after.last_assistant_message == "back"
        events = runtime.store.read(session_id)
    assert_histories_valid(events)
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session_id, timeout=10)  # across the crash and the re-run
        assert result.ok, result.divergence and result.divergence.message()
    return events[before:]


def test_read_only_calls_cut_off_by_a_crash_run_again(tmp_path: Path) -> None:
    config = McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])
    calls = [call("t__slow", seconds=0.5), call("t__echo", text="again")]
    session_id = crash_during(tmp_path, calls, config)
    after = resume(tmp_path, session_id, config)
    kinds = [type(e.body).__name__ for e in after]  # type: ignore[attr-defined]
    # The takeover first, then the calls started again, answered in the model's order.
    assert kinds[:3] == ["SessionResumed", "ToolCallStarted", "ToolCallStarted"]
    answers = [e.body for e in after if isinstance(e.body, ToolCallCompleted)]  # type: ignore[attr-defined]
    assert [(a.output, a.outcome) for a in answers] == [("slept 0.5s", "ok"), ("again", "ok")]
    aborted = next(e.body for e in after if isinstance(e.body, TurnAborted))  # type: ignore[attr-defined]
    assert (aborted.reason, aborted.cause) == ("crashed", "crash")
    assert sum(isinstance(e.body, TaskCompleted) for e in after) == 1  # type: ignore[attr-defined]


def test_a_call_that_is_not_idempotent_is_never_run_twice(tmp_path: Path) -> None:
    counter = tmp_path / "bump.count"
    config = McpServerConfig(
        command=sys.executable,
        args=[str(SERVER), "stdio"],
        env={"PLAIT_TEST_COUNTER": str(counter)},
    )
    session_id = crash_during(tmp_path, [call("t__bump", hold=1.0)], config)
    after = resume(tmp_path, session_id, config)
    answers = [e.body for e in after if isinstance(e.body, ToolCallCompleted)]  # type: ignore[attr-defined]
    assert [(a.output, a.outcome) for a in answers] == [(UNKNOWN, "unknown")]
    assert not any(isinstance(e.body, ToolCallStarted) for e in after)  # type: ignore[attr-defined]
    runs = counter.read_text().count("bump") if counter.exists() else 0  # killed before it ran
    assert runs <= 1


def test_a_tool_the_config_declares_idempotent_runs_again(tmp_path: Path) -> None:
    counter = tmp_path / "bump.count"
    config = McpServerConfig(
        command=sys.executable,
        args=[str(SERVER), "stdio"],
        env={"PLAIT_TEST_COUNTER": str(counter)},
        idempotent_tools=["bump"],
    )
    session_id = crash_during(tmp_path, [call("t__bump", hold=0.2)], config)
    after = resume(tmp_path, session_id, config)
    answers = [e.body for e in after if isinstance(e.body, ToolCallCompleted)]  # type: ignore[attr-defined]
    runs = counter.read_text().count("bump")
    assert [(json.loads(str(a.output)), a.outcome) for a in answers] == [(runs, "ok")]
