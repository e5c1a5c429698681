"""``McpServers``: background start, readiness, failures, restarts with backoff, refreshes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait import McpError
from plait.actors.mcp import Backoff, McpServerConfig, McpServers
from plait.events import McpServerFailed, McpServerReady, McpToolsRefreshed

MINIMAL = r"""
import json, sys
tool = {"name": "die", "inputSchema": {"type": "object"}}
for line in sys.stdin:
    msg = json.loads(line)
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "minimal", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [tool]}
    elif method == "tools/call":
        sys.exit(5)
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""
"""A hand-written stdio server (it starts in milliseconds): one tool, ``die``, that exits 5."""

FLAKY = (
    r"""
import os, sys
if os.path.exists("started"):
    sys.stderr.write("cannot start twice\n")
    sys.exit(7)
open("started", "w").close()
"""
    + MINIMAL
)
"""``MINIMAL``, but it starts only once in a directory."""


@pytest.fixture(scope="module")
def session(loop, stdio, new_reports) -> Iterator[McpServers]:
    """Servers of every kind, started once for the module; ``session.reports`` has reports."""
    configs = {
        "kit": stdio(),
        "missing": McpServerConfig(command="plait-no-such-command"),
        "off": stdio(enabled=False),
        "stuck": McpServerConfig(
            command=sys.executable,
            args=["-c", "import sys; sys.stdin.read()"],
            startup_timeout_sec=0.5,
        ),
    }
    reports = new_reports()
    servers = McpServers(configs, reports)
    servers.reports = reports  # type: ignore[attr-defined]
    loop.run(servers.start())
    assert servers.status("kit") == "starting"  # start() returned before the server was up
    yield servers
    loop.run(servers.close())


def test_a_server_becomes_ready_and_is_reported(loop, session: McpServers) -> None:
    tools = loop.run(session.wait_ready("kit"))
    assert "kit__echo" in [t.name for t in tools]
    ready = session.reports.wait_for(lambda b: isinstance(b, McpServerReady))
    assert ready == McpServerReady("kit", tools, attempt=1)
    assert session.status("kit") == "ready"
    assert list(session.tools()) == ["kit"]


def test_calls_go_through_the_named_server(loop, session: McpServers) -> None:
    assert loop.run(session.call("kit", "add", '{"a": 20, "b": 22}')).output == "42"
    refused = loop.run(session.call("kit", "add", '{"a": 20}'))
    assert refused.outcome == "error" and "'b' is a required property" in refused.output
    unknown = loop.run(session.call("nope", "add", "{}"))
    assert (unknown.outcome, unknown.output) == ("error", "no MCP server named 'nope'")


@pytest.mark.parametrize(
    ("server", "reason"),
    [
        ("missing", "command not found: plait-no-such-command"),
        ("stuck", "initialize timed out after 0.5s"),
    ],
)
def test_a_server_that_cannot_start_is_reported_once_and_not_retried(
    loop, session: McpServers, server: str, reason: str
) -> None:
    failed = session.reports.wait_for(
        lambda b: isinstance(b, McpServerFailed) and b.server == server
    )
    assert failed == McpServerFailed(server, reason, attempt=1, retry_in_sec=None)
    with pytest.raises(McpError, match=f"MCP server '{server}' is failed: {reason}"):
        loop.run(session.wait_ready(server))
    result = loop.run(session.call(server, "echo", {"text": "x"}))
    assert result.outcome == "error" and reason in result.output
    assert [b for b in session.reports.bodies if getattr(b, "server", "") == server] == [failed]


def test_a_disabled_server_never_starts(loop, session: McpServers) -> None:
    assert session.status("off") == "disabled"
    with pytest.raises(McpError, match="MCP server 'off' is disabled: disabled in its config"):
        loop.run(session.wait_ready("off"))
    assert not [b for b in session.reports.bodies if getattr(b, "server", "") == "off"]


def test_an_unknown_server_is_named(loop, session: McpServers) -> None:
    with pytest.raises(McpError, match=r"no MCP server named 'git' \(configured: kit, missing"):
        loop.run(session.wait_ready("git"))


def test_tools_list_changed_is_reported_as_a_refresh(loop, session: McpServers) -> None:
    assert loop.run(session.call("kit", "grow", {})).output == "grown"
    refreshed = session.reports.wait_for(lambda b: isinstance(b, McpToolsRefreshed))
    assert refreshed.server == "kit" and "kit__extra" in [t.name for t in refreshed.tools]
    assert session.tools()["kit"] == refreshed.tools
    assert loop.run(session.call("kit", "extra", {})).output == "extra"


def test_a_crashed_server_is_restarted_with_backoff(loop, stdio, new_reports, gone) -> None:
    reports = new_reports()
    servers = McpServers({"boom": stdio()}, reports, backoff=Backoff(initial_sec=0.05))
    loop.run(servers.start())
    with pytest.raises(McpError, match=r"MCP server 'boom' is not ready after 0.01s \(starting\)"):
        loop.run(servers.wait_ready("boom", timeout=0.01))
    loop.run(servers.wait_ready("boom"))
    first = servers.connection("boom")
    assert first is not None and first.pid is not None
    crashed = loop.run(servers.call("boom", "crash", {}))
    assert crashed.outcome == "error"
    assert crashed.output == "MCP server 'boom' exited with code 3: crashing on purpose"
    # The next call waits for the restart instead of failing.
    assert loop.run(servers.call("boom", "echo", {"text": "back"})).output == "back"
    second = servers.connection("boom")
    assert second is not None and second.pid != first.pid and gone(first.pid)
    assert reports.bodies == [
        McpServerReady("boom", first.tools, attempt=1),
        McpServerFailed("boom", "exited with code 3: crashing on purpose", 1, 0.05),
        McpServerReady("boom", second.tools, attempt=2),
    ]
    loop.run(servers.close())
    assert second.pid is not None and gone(second.pid)
    assert servers.status("boom") == "closed"
    loop.run(servers.close())  # idempotent


def test_restarts_back_off_and_give_up(loop, new_reports, tmp_path: Path) -> None:
    reports = new_reports()
    config = McpServerConfig(command=sys.executable, args=["-c", FLAKY], cwd=str(tmp_path))
    backoff = Backoff(initial_sec=0.01, max_failures=3)
    servers = McpServers({"flaky": config}, reports, backoff=backoff)
    loop.run(servers.start())
    loop.run(servers.wait_ready("flaky"))
    died = loop.run(servers.call("flaky", "die", {}))
    assert died.output == "MCP server 'flaky' exited with code 5"
    reports.wait_for(lambda b: isinstance(b, McpServerFailed) and b.retry_in_sec is None)
    assert reports.bodies[1:] == [
        McpServerFailed("flaky", "exited with code 5", 1, 0.01),
        McpServerFailed("flaky", "exited with code 7: cannot start twice", 2, 0.02),
        McpServerFailed("flaky", "exited with code 7: cannot start twice", 3, None),
    ]
    assert servers.status("flaky") == "failed"
    assert servers.tools() == {}
    loop.run(servers.close())


def test_an_http_server_that_went_away_is_reconnected_then_given_up(
    loop, new_reports, spawn_http
) -> None:
    web = spawn_http()
    reports = new_reports()
    backoff = Backoff(initial_sec=0.01, max_failures=2)
    servers = McpServers({"web": McpServerConfig(url=web.url)}, reports, backoff=backoff)
    loop.run(servers.start())
    assert loop.run(servers.call("web", "echo", {"text": "hi"})).output == "hi"
    web.close()
    lost = loop.run(servers.call("web", "echo", {"text": "hi"}))
    assert (lost.outcome, lost.output) == ("error", "MCP server 'web' closed the connection")
    given_up = reports.wait_for(lambda b: isinstance(b, McpServerFailed) and b.retry_in_sec is None)
    assert reports.bodies[1] == McpServerFailed("web", "closed the connection", 1, 0.01)
    assert given_up.attempt == 2 and given_up.reason.startswith("connection failed: ConnectError")
    loop.run(servers.close())


def test_backoff_doubles_up_to_its_limit() -> None:
    backoff = Backoff(initial_sec=0.5, max_sec=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_close_leaves_no_server_running(loop, new_reports, children) -> None:
    before = children()
    never_ready = McpServerConfig(
        command=sys.executable, args=["-c", "import sys; sys.stdin.read()"], startup_timeout_sec=60
    )
    minimal = McpServerConfig(command=sys.executable, args=["-c", MINIMAL])
    servers = McpServers({"a": minimal, "b": never_ready}, new_reports())
    loop.run(servers.start())
    loop.run(servers.wait_ready("a"))  # "b" is still starting: close it anyway
    assert len(children() - before) == 2 and servers.status("b") == "starting"
    loop.run(servers.close())
    assert children() == before
    assert servers.status("a") == servers.status("b") == "closed"
    with pytest.raises(McpError, match="MCP servers are closed"):
        loop.run(servers.start())
