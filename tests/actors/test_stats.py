"""Per-conversation metrics, from the API and from ``plait stats``, after a real session."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

from scripted import call, runtime_for

from plait.actors.mcp import McpServerConfig
from plait.events import AgentMessageDelta, Event, TurnAborted
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"


def test_stats_count_tokens_tools_mcp_latency_cancellations_and_failures(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("t__echo", text="hi"), call("t__fail", message="no")]),
        Step(text="done", prompt_tokens=120),
        Step(tool_calls=[call("conv_create", user_instruction="help")]),
        Step(text="helped"),
        Step(text="thanks"),
        Step(text="word " * 200, chunk_chars=5, chunk_delay=0.02),
        Step(status=503),
        Step(status=503),
        Step(status=503),
    ]
    ids = itertools.count(1)
    servers = {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])}
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server, tmp_path, mcp_servers=servers, new_id=lambda: f"id-{next(ids)}"
        ) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("tools", timeout=60).ok
        assert session.run("delegate", timeout=60).ok
        with session.subscribe() as feed:
            task = session.submit("talk")
            while not isinstance(item := feed.get(timeout=30), AgentMessageDelta):
                assert item is not None, "no text streamed"
            session.interrupt()
            while not (isinstance(item, Event) and isinstance(item.body, TurnAborted)):
                item = feed.get(timeout=30)
                assert item is not None, "the task was not interrupted"
            assert item.task_id == task
        assert session.run("fail", timeout=60).status == "model_error"
        stats = session.stats()
    root, helper = list(stats)  # in the order they first acted
    assert root == session.root_conversation_id
    mine, theirs = stats[root], stats[helper]
    assert (mine.tasks, theirs.tasks) == (5, 1)  # tools, delegate + its continuation, talk, fail
    assert (mine.tool_calls, mine.tool_failures) == (3, 1)  # echo, fail (error), conv_create
    assert mine.mcp_calls == 2 and 0 < mine.mcp_ms_mean <= mine.mcp_ms_max
    assert (mine.cancellations, mine.failures, mine.model_retries) == (1, 1, 3)
    assert mine.context_tokens > 0 and mine.usage.prompt_tokens > 120
    assert theirs.usage.completion_tokens > 0
    # plait stats prints the same figures
    shown = subprocess.run(
        [sys.executable, "-m", "plait", "--store", str(tmp_path / "plait.db"), "stats", "id-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    # a pipe: rows, no header; under CONV TASKS TURNS ... TOOL CALLS TOOL ERRORS MCP CALLS
    first = shown.stdout.splitlines()[0].split()
    assert [first[0], first[1], first[7], first[8], first[9]] == [root[:8], "5", "3", "1", "2"]
    as_json = subprocess.run(
        [sys.executable, "-m", "plait", "--store", str(tmp_path / "plait.db"), "stats", "id-1",
         "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["conversation_id"], r["mcp_calls"]) for r in rows] == [(root, 2), (helper, 0)]
