"""How MCP calls start: a reply's first calls are recorded started with the reply (one commit),
later ones and those that wait for a slot on their own, always before their server sees them."""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted import call, runtime_for

from plait.actors import CallTool, EffectLoop, Journal, McpLimits, ToolFinished
from plait.actors.mcp import CallResult, Dispatcher, McpServerConfig
from plait.events import (
    Event,
    McpToolSnapshot,
    MemoryStore,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
)
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
        limits = limits or McpLimits()
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


class Inbox:
    """Stands in for a conversation's ref: keeps what it is told."""

    def __init__(self) -> None:
        self.told: queue.Queue[Any] = queue.Queue()

    def tell(self, message: Any) -> None:
        self.told.put(message)


class Servers:
    """Stands in for ``McpServers``: each call waits until the test lets it end."""

    def __init__(self) -> None:
        self.calls: queue.Queue[str] = queue.Queue()
        self.go = threading.Event()

    async def call(self, server: str, tool: str, arguments: str, *, call_id: str) -> CallResult:
        self.calls.put(call_id)
        await asyncio.to_thread(self.go.wait, 10)
        return CallResult(f"{tool} done")


@pytest.fixture
def dispatcher() -> Iterator[tuple[Dispatcher, Servers, MemoryStore, list[None]]]:
    store, effects, servers = MemoryStore(), EffectLoop(), Servers()
    wakes: list[None] = []
    limits = McpLimits(per_conversation=2)
    calls = Dispatcher(Journal(store, "s"), effects, limits, None, lambda: wakes.append(None))
    calls.servers = servers
    calls.offer({"t__echo": (McpToolSnapshot("t__echo", "echo"), "t")})
    yield calls, servers, store, wakes
    servers.go.set()
    effects.close()


def request(inbox: Inbox, index: int, name: str = "t__echo", token: int = 1) -> CallTool:
    return CallTool("c", "task", f"call_{index}", token, index, name, "{}", inbox)


def test_held_calls_take_slots_up_to_the_limit_and_start_without_recording(dispatcher: Any) -> None:
    calls, servers, store, wakes = dispatcher
    inbox = Inbox()
    started = calls.hold([request(inbox, i) for i in range(3)])
    assert [s.call_id for s in started] == ["call_0", "call_1"]  # two slots a conversation
    for i in range(3):
        calls.call(request(inbox, i))
    assert {servers.calls.get(timeout=10), servers.calls.get(timeout=10)} == {"call_0", "call_1"}
    assert store.read("s") == []  # the caller records the held calls' starts
    servers.go.set()
    assert {inbox.told.get(timeout=10).index for _ in range(2)} == {0, 1}
    assert wakes  # a slot freed while a call waited: the pool's thread is asked to start it
    calls.dispatch()
    assert [e.body.call_id for e in store.read("s")] == ["call_2"]  # recorded, then sent
    assert servers.calls.get(timeout=10) == "call_2"
    assert inbox.told.get(timeout=10).index == 2


def test_a_cancelled_turn_frees_its_held_slots_and_unknown_tools_are_refused(
    dispatcher: Any,
) -> None:
    calls, servers, _, _ = dispatcher
    inbox = Inbox()
    assert len(calls.hold([request(inbox, 0), request(inbox, 1)])) == 2
    calls.cancel("c", 1)
    assert len(calls.hold([request(inbox, 0, token=2), request(inbox, 1, token=2)])) == 2
    calls.call(request(inbox, 5, name="t__nothing", token=2))
    refused = inbox.told.get(timeout=10)
    assert isinstance(refused, ToolFinished) and refused.result.outcome == "refused"
    assert servers.calls.empty()
