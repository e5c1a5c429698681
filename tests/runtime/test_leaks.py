"""Rapid open / message / close cycles leave nothing behind: no thread, no
actor, no MCP server process outlives its session, however many sessions come and go."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pykka
from scripted import call, runtime_for

from plait.actors.mcp import McpServerConfig
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"


def children() -> set[int]:
    """This process's live child processes (Linux)."""
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # it ended meanwhile
            if int(fields[1]) == me and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_sessions_that_come_and_go_leave_no_thread_actor_or_server(tmp_path: Path) -> None:
    servers = {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])}
    rounds = 4
    script = [
        step
        for _ in range(rounds)
        for step in (
            Step(tool_calls=[call("conv_create", user_instruction="help")]),
            Step(tool_calls=[call("t__echo", text="hi")]),
            Step(text="helped"),
            Step(text="done"),
        )
    ]
    with ScriptedModelServer(script) as server:
        before = {t.ident for t in threading.enumerate()}
        actors, processes = len(pykka.ActorRegistry.get_all()), children()
        for round_ in range(rounds):
            with runtime_for(server, tmp_path, mcp_servers=servers) as runtime:
                session = runtime.start_session()
                assert session.run(f"round {round_}", timeout=60).ok
                assert len(children() - processes) == 1  # its MCP server, while it is open
            # No more than before (a thread or actor of an earlier test may end meanwhile).
            assert len(pykka.ActorRegistry.get_all()) <= actors, f"actors left: round {round_}"
            assert children() <= processes, f"MCP servers left after round {round_}"
        # A thread that has done its part (set a future's result, say) may take a moment more
        # to end: wait for each; one that lives on has leaked.
        started = [t for t in threading.enumerate() if t.ident not in before]
        deadline = time.monotonic() + 10
        for thread in started:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        assert [t.name for t in started if t.is_alive()] == []
