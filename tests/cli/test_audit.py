"""``plait audit`` of calls a stop cut off (docs/replay.md#audit): a real ``plait exec``, a real
MCP server over stdio, a real SIGINT. A call sent to its server may have acted: it is audited
``unknown``, never as if it had not run."""

from __future__ import annotations

import json
import signal
import sys
from typing import TYPE_CHECKING

from scripted import TEST_SERVER_PY, call

from plait.events import Event, SqliteStore, ToolCallStarted
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


def test_a_sigint_while_a_tool_runs_audits_the_call_unknown(
    cli: Cli, server: ScriptedModelServer
) -> None:
    mcp = f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{TEST_SERVER_PY}", "stdio"]\n'
    cli.configure(server.base_url, mcp)
    server.push(Step(text="Waiting.", tool_calls=[call("t__slow", seconds=120)]))
    running = cli.spawn("exec", "--grace-sec", "1", "Wait two minutes.")
    assert running.out.next() == "Waiting.\n"  # the reply is recorded: its call comes next
    with SqliteStore(cli.store) as store, store.subscribe() as tail:
        sent: Event | None = None
        while sent is None and (event := tail.get(timeout=60)) is not None:
            sent = event if isinstance(event.body, ToolCallStarted) else None
        assert sent is not None, "the call was never sent to its server"
    code, err = running.stop(signal.SIGINT)
    assert code == 130, err
    audited = cli("audit", sent.stream, "--json")
    assert audited.returncode == 0, audited.stderr
    (row,) = [json.loads(line) for line in audited.stdout.splitlines()]
    assert (row["tool"], row["server"], row["outcome"]) == ("t__slow", "t", "unknown")
    unknown = cli("audit", sent.stream, "--outcome", "unknown")
    assert "t__slow" in unknown.stdout
    assert cli("verify", sent.stream).returncode == 0
