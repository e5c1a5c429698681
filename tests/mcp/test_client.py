"""``McpConnection`` against real server processes: the test server over stdio and HTTP."""

from __future__ import annotations

import asyncio
import base64
import re
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from plait import McpError
from plait.actors.mcp import McpConnection, McpServerConfig, merge
from plait.events import McpToolSnapshot

TOOLS = [
    "add", "crash", "echo", "fail", "grow", "header", "huge", "image",
    "lookup", "note", "pick", "rendezvous", "served", "slow",
]  # fmt: skip
READ_ONLY = {
    "add", "echo", "header", "huge", "image", "lookup", "pick", "rendezvous", "served", "slow"
}  # fmt: skip


@pytest.fixture(scope="module")
def kit(loop, stdio, gone) -> Iterator[McpConnection]:
    """The test server over stdio, started once for the module."""
    conn = McpConnection("kit", stdio(tool_timeout_sec=5))
    loop.run(conn.start())
    yield conn
    pid = conn.pid
    loop.run(conn.close())
    assert pid is not None and gone(pid)


def served(loop, conn: McpConnection) -> int:
    return int(loop.run(conn.call("served", {})).output)


def test_start_lists_every_page_of_tools(kit: McpConnection) -> None:
    # The server pages by 3, so 14 tools take 5 tools/list requests.
    assert [t.tool for t in kit.tools] == TOOLS
    assert [t.name for t in kit.tools] == [f"kit__{name}" for name in TOOLS]
    assert kit.alive and kit.pid is not None


def test_read_only_comes_from_the_annotations(kit: McpConnection) -> None:
    assert {t.tool for t in kit.tools if t.read_only} == READ_ONLY
    note = next(t for t in kit.tools if t.tool == "note")
    assert note.annotations == {"destructiveHint": False, "idempotentHint": True}


def test_the_snapshot_records_the_schema(kit: McpConnection) -> None:
    add = next(t for t in kit.tools if t.tool == "add")
    schema = msgspec.json.decode(add.input_schema)
    assert schema["required"] == ["a", "b"] and add.description == "Add two integers."


def test_a_call_returns_its_text(loop, kit: McpConnection) -> None:
    result = loop.run(kit.call("add", '{"a": 2, "b": 40}'))
    assert (result.output, result.outcome, result.images) == ("42", "ok", [])
    assert result.duration_ms > 0


def test_is_error_is_an_error_result(loop, kit: McpConnection) -> None:
    result = loop.run(kit.call("fail", {"message": "no such file"}))
    assert result.outcome == "error" and "no such file" in result.output


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("add", '{"a": 1', "arguments for kit__add are not valid JSON"),
        ("add", "[1, 2]", "arguments for kit__add must be a JSON object"),
        ("add", {"a": 1}, "invalid arguments for kit__add: 'b' is a required property"),
        ("pick", {"color": "blue", "count": 1}, "at arguments.color: 'blue' is not one of"),
        ("nope", {}, "MCP server 'kit' offers no tool 'nope'"),
    ],
)
def test_bad_calls_are_refused_without_calling_the_server(
    loop, kit: McpConnection, tool: str, arguments: object, says: str
) -> None:
    before = served(loop, kit)
    result = loop.run(kit.call(tool, arguments))  # type: ignore[arg-type]
    assert result.outcome == "error" and says in result.output, result.output
    assert result.duration_ms == 0
    assert served(loop, kit) == before


def test_a_timeout_cancels_and_later_calls_work(loop, kit: McpConnection) -> None:
    result = loop.run(kit.call("slow", {"seconds": 30}, timeout=0.2))
    assert result.outcome == "timeout"
    assert result.output == "kit__slow timed out after 0.2s; the server was asked to cancel it"
    assert 200 <= result.duration_ms < 5000
    assert loop.run(kit.call("echo", {"text": "still here"})).output == "still here"


def test_a_huge_output_arrives_whole(loop, kit: McpConnection) -> None:
    result = loop.run(kit.call("huge", {"size": 1_000_000}))
    assert result.outcome == "ok" and result.output == "x" * 1_000_000


def test_an_image_is_kept_as_an_attachment(loop, kit: McpConnection) -> None:
    result = loop.run(kit.call("image", {}))
    assert result.outcome == "ok" and result.output == ""
    [(mime, data)] = result.images
    assert mime == "image/png" and base64.b64decode(data).startswith(b"\x89PNG")


def test_variants_conflict_on_one_tool_and_close_leaves_no_process(
    loop, kit: McpConnection, stdio, gone
) -> None:
    other = McpConnection("kit", stdio("--variant", "b"))
    loop.run(other.start())
    pid = other.pid
    try:
        tools, conflicts = merge({"kit-a": kit.tools, "kit-b": other.tools})
    finally:
        loop.run(other.close())
    assert pid is not None and gone(pid)
    assert [c.name for c in conflicts] == ["kit__lookup"]
    assert conflicts[0].servers == ["kit-a", "kit-b"]
    assert [t.tool for t in tools] == [name for name in TOOLS if name != "lookup"]
    assert loop.run(other.call("echo", {"text": "x"})).output == "MCP server 'kit' is closed"


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("plait-no-such-command", [], "MCP server 'bad': command not found: plait-no-such-command"),
        (
            sys.executable,
            ["-c", "import sys; sys.stderr.write('bad config: no token\\n'); sys.exit(4)"],
            "MCP server 'bad': exited with code 4: bad config: no token",
        ),
        (
            sys.executable,
            ["-c", "import sys; print('not json', flush=True); sys.stdin.read()"],
            "MCP server 'bad': initialize timed out after 0.5s",
        ),
        (
            sys.executable,
            [
                "-c",
                "import sys; sys.stderr.write('waiting\\n'); sys.stderr.flush(); sys.stdin.read()",
            ],
            "MCP server 'bad': initialize timed out after 0.5s; stderr: waiting",
        ),
    ],
)
def test_start_failures_say_what_happened(loop, command: str, args: list[str], says: str) -> None:
    conn = McpConnection(
        "bad", McpServerConfig(command=command, args=args, startup_timeout_sec=0.5)
    )
    with pytest.raises(McpError) as caught:
        loop.run(conn.start())
    assert str(caught.value) == says
    loop.run(conn.close())


def test_a_missing_working_directory_is_named(loop, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    conn = McpConnection("bad", McpServerConfig(command=sys.executable, cwd=str(missing)))
    with pytest.raises(McpError, match=re.escape(f"working directory not found: {missing}")):
        loop.run(conn.start())


def test_close_stops_the_whole_process_group(loop, gone) -> None:
    # The server leaves a grandchild behind: closing must stop it too.
    python = shlex.quote(sys.executable)
    script = f"sleep 60 & echo $! >&2; exec {python} -c 'import sys; sys.stdin.read()'"
    conn = McpConnection(
        "tree", McpServerConfig(command="sh", args=["-c", script], startup_timeout_sec=0.5)
    )
    with pytest.raises(McpError, match="initialize timed out") as caught:
        loop.run(conn.start())
    grandchild = int(str(caught.value).rsplit("stderr: ", 1)[1])
    assert not gone(grandchild)
    loop.run(conn.close())
    assert gone(grandchild)


def test_a_close_before_the_start_goes_on_spawns_nothing(loop, tmp_path: Path) -> None:
    # A worker stopped as its sessions' servers start: the close came before the start had
    # spawned its server. The start ends there, rather than spawn the server and wait for
    # its initialize (seconds under load, up to startup_timeout_sec) to stop it after.
    seen = tmp_path / "seen"
    script = f"import sys; open({str(seen)!r}, 'w').write(sys.stdin.readline())"
    config = McpServerConfig(command=sys.executable, args=["-c", script], startup_timeout_sec=60)
    conn = McpConnection("late", config)

    async def start_then_close() -> str:
        starting = asyncio.ensure_future(conn.start())
        await asyncio.sleep(0)  # the start has made its runner, which has not run yet
        await conn.close()
        with pytest.raises(McpError) as caught:
            await starting
        return str(caught.value)

    assert loop.run(start_then_close()) == "MCP server 'late': closed while starting"
    assert not seen.exists(), f"the server was spawned and sent {seen.read_text()!r}"


# --- streamable HTTP -------------------------------------------------------------------------


class Changes:
    """Tool lists a connection reports after ``tools/list_changed``, and the thread it used."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[McpToolSnapshot]]] = []
        self._changed = threading.Condition()

    def __call__(self, tools: list[McpToolSnapshot]) -> None:
        with self._changed:
            self.seen.append((threading.current_thread().name, tools))
            self._changed.notify_all()

    def wait(self, count: int) -> tuple[str, list[McpToolSnapshot]]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.seen) >= count, 10)
            return self.seen[count - 1]


@pytest.fixture(scope="module")
def remote(loop, http_server) -> Iterator[tuple[McpConnection, Changes]]:
    """A connection to the HTTP test server, and the tool-list changes it reports."""
    changes = Changes()
    config = McpServerConfig(url=http_server.url, headers={"X-Plait-Test": "yes"})
    conn = McpConnection("remote", config, on_tools_changed=changes)
    loop.run(conn.start())
    yield conn, changes
    loop.run(conn.close())


def test_http_lists_calls_and_sends_the_headers(loop, remote) -> None:
    conn, _ = remote
    assert [t.tool for t in conn.tools] == TOOLS and conn.pid is None
    assert loop.run(conn.call("add", {"a": 1, "b": 2})).output == "3"
    assert loop.run(conn.call("header", {"name": "X-Plait-Test"})).output == "yes"


def test_http_timeout_and_huge_output(loop, remote) -> None:
    conn, _ = remote
    assert loop.run(conn.call("slow", {"seconds": 30}, timeout=0.2)).outcome == "timeout"
    assert len(loop.run(conn.call("huge", {"size": 1_000_000})).output) == 1_000_000


def test_tools_list_changed_relists_and_reports_on_the_loop_thread(loop, remote) -> None:
    conn, changes = remote
    assert loop.run(conn.call("grow", {})).output == "grown"
    thread, tools = changes.wait(1)
    assert thread == "plait-effects"
    assert "remote__extra" in [t.name for t in tools] == [t.name for t in conn.tools]
    assert loop.run(conn.call("extra", {})).output == "extra"


def test_an_unreachable_url_is_a_start_failure(loop) -> None:
    conn = McpConnection(
        "gone", McpServerConfig(url="http://127.0.0.1:9/mcp", startup_timeout_sec=2)
    )
    with pytest.raises(McpError, match=r"MCP server 'gone': connection failed: .*ConnectError"):
        loop.run(conn.start())
    loop.run(conn.close())
