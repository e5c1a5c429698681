"""How MCP calls start: a reply's first calls are recorded started with the reply (one commit),
later ones and those that wait for a slot on their own, always before their server sees them."""

from __future__ import annotations

import sys
from pathlib import Path

from scripted import call, runtime_for

from plait.actors.mcp import McpServerConfig
from plait.actors.pool import McpLimits
from plait.events.types import Event, ToolCallCompleted, ToolCallRequested, ToolCallStarted
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"
T = McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])


def groups(events: list[Event]) -> list[list[str]]:
    """The call events, grouped by append (one clock reading an append: the same ``at``)."""
    kinds = ToolCallRequested | ToolCallStarted | ToolCallCompleted
    out: list[list[str]] = []
    last = None
    for event in events:
        if not isinstance(event.body, kinds):
            continue
        name = f"{type(event.body).__name__.removeprefix('ToolCall')}:{event.body.call_id}"
        if event.at != last:
            out.append([])
        out[-1].append(name)
        last = event.at
    return out


def run(tmp_path: Path, script: list[Step], limits: McpLimits | None = None) -> list[Event]:
    with ScriptedModelServer(script) as server:
        runtime = runtime_for(server, tmp_path, mcp_servers={"t": T}, mcp_limits=limits)
        with runtime:
            session = runtime.start_session()
            assert session.run("go", timeout=60).ok
            return runtime.store.read(session.session_id)


def test_a_replys_first_call_is_recorded_started_with_the_reply(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("t__echo", text="a")]), Step(text="done")]
    assert groups(run(tmp_path, script)) == [
        ["Requested:call_1", "Started:call_1"],
        ["Completed:call_1"],
    ]


def test_serial_calls_after_the_first_are_recorded_started_on_their_own(tmp_path: Path) -> None:
    write = call("t__note", key="k", text="v")
    script = [Step(tool_calls=[call("t__echo", text="a"), write]), Step(text="done")]
    assert groups(run(tmp_path, script)) == [
        ["Requested:call_1", "Requested:call_2", "Started:call_1"],
        ["Completed:call_1"],
        ["Started:call_2"],
        ["Completed:call_2"],
    ]


def test_parallel_calls_without_a_slot_start_when_one_frees(tmp_path: Path) -> None:
    echo = call("t__echo", text="a")
    script = [Step(tool_calls=[echo, echo, echo]), Step(text="done")]
    events = run(tmp_path, script, McpLimits(per_session=2))
    found = groups(events)
    assert found[0] == [
        "Requested:call_1",
        "Requested:call_2",
        "Requested:call_3",
        "Started:call_1",
        "Started:call_2",
    ]
    # The third waited for a slot: its start is recorded alone, before its end.
    flat = [name for group in found for name in group]
    assert ["Started:call_3"] in found
    assert flat.index("Started:call_3") < flat.index("Completed:call_3")
    outputs = [e.body.output for e in events if isinstance(e.body, ToolCallCompleted)]
    assert outputs == ["a", "a", "a"]
