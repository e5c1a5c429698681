"""``plait exec`` as a user runs it: a real subprocess, a real HTTP model server, real MCP
servers; the answer streams to stdout, everything else to stderr, failures are one line."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scripted import call

from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"


def session_of(stderr: str) -> str:
    """The session id from exec's first status line, ``session ID started|resumed (...)``."""
    first = stderr.splitlines()[0].split()
    assert first[0] == "session", stderr
    return first[1]


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_exec_streams_the_answer_then_goes_on_in_the_session_and_a_conversation(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    server.push(
        Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count.")]),
        Step(text="There are two."),
        Step(text="The helper says two."),
    )
    first = cli("exec", "How many?")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Asking a helper.\nThe helper says two.\n"  # the root's text only
    assert "-> conv_create(" in first.stderr and "There are two." in first.stderr
    session = session_of(first.stderr)
    helper = json_lines(cli("conversations", session, "--json").stdout)[1]
    assert helper["parent_id"] is not None

    # The prompt from stdin, into the helper conversation, streamed as JSON Lines.
    server.push(Step(text="Two, I said.", chunk_chars=4))
    second = cli(
        "exec", "--session", session[:8], "--conversation", helper["id"][:6], "--json", "-",
        stdin="Sure?",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    lines = json_lines(second.stdout)
    deltas = [x["text"] for x in lines if x.get("type") == "AgentMessageDelta"]
    assert deltas == ["Two,", " I s", "aid."]
    events = [x for x in lines if "seq" in x]
    assert [e["seq"] for e in events] == list(range(events[0]["seq"], events[-1]["seq"] + 1))
    assert {e["conversation_id"] for e in events} == {helper["id"]}
    assert lines[-1] == {
        "type": "TaskOutcome",
        "session_id": session,
        "task_id": events[0]["task_id"],
        "conversation_id": helper["id"],
        "status": "completed",
        "last_assistant_message": "Two, I said.",
        "detail": "",
        "error_kind": None,
    }
    # The helper's model was shown its own history, then the new prompt.
    assert [m["content"] for m in server.requests[-1].messages[1:]] == [
        "Count.",
        "There are two.",
        "Sure?",
    ]
    history = cli("history", session, "--conversation", helper["id"][:6], "--limit", "2")
    assert history.stdout == "     user: Sure?\nassistant: Two, I said.\n"


def test_exec_prints_text_as_it_arrives_and_ctrl_c_stops_the_task_as_the_users(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    server.push(
        Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count.")]),
        Step(text="Counting very slowly", chunk_chars=1, chunk_delay=30),  # never ends here
    )
    running = cli.spawn("exec", "--grace-sec", "0", "How many?")
    assert running.out.next() == "Asking a helper.\n"  # while the helper's reply still streams
    server.wait_for_requests(2)
    code, err = running.stop()
    assert code == 130
    session = session_of(err)
    line = err.splitlines()[-1]
    assert line.endswith(f"stopped at checkpoint 0, session {session} handed back"), line
    log = [json.loads(line) for line in cli("log", session, "--json").stdout.splitlines()]
    aborted = [e["body"] for e in log if e["body"]["type"] == "TurnAborted"]
    # The helper's task was replaced by it; the Ctrl-C cut the helper's, saying who stopped it.
    assert [(b["reason"], b["cause"], b["detail"]) for b in aborted][-1] == (
        "interrupted",
        "shutdown",
        "stopped by the user (Ctrl-C)",
    )
    assert "SessionClosed" not in {e["body"]["type"] for e in log}  # handed back, not closed


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port bound by no listener: connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.mark.parametrize("case", ["401", "unreachable", "no key"])
def test_a_model_that_cannot_answer_is_one_line_and_exit_code_1(
    cli: Cli, server: ScriptedModelServer, refused_port: int, case: str
) -> None:
    server.push(Step(status=401, error_message="Incorrect API key provided"))
    url = {
        "401": server.base_url,
        "unreachable": f"http://127.0.0.1:{refused_port}/v1",
        "no key": "https://models.example.com/v1",
    }[case]
    cli.configure(url)
    result = cli("exec", "Hello?")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    if case == "401":
        assert last == (
            "plait: the model server rejected the API key (401): Incorrect API key provided; "
            "the key is read from $OPENAI_API_KEY"
        )
    elif case == "unreachable":
        assert last.startswith(f"plait: cannot reach the model server at {url}: ")
        assert last.endswith("(is it running? model.base_url says where)")
    else:
        assert result.stderr == (
            "plait: no API key for the model server at https://models.example.com/v1: "
            "set OPENAI_API_KEY\n"
        )
        assert not cli.store.exists()  # refused before anything was made


def test_exec_has_nobody_to_ask_so_calls_that_need_approval_are_denied(
    cli: Cli, server: ScriptedModelServer
) -> None:
    test_server = f'command = "{sys.executable}"\nargs = ["{TEST_SERVER}"]\n'
    cli.configure(
        server.base_url,
        f'[policy]\napproval = "on-write"\n[mcp_servers.t]\n{test_server}',
    )
    note, echo = call("t__note", key="k", text="v"), call("t__echo", text="hi")
    server.push(Step(tool_calls=[echo, note]), Step(text="I could not write the note."))
    result = cli("exec", "Write a note.")
    assert result.returncode == 0, result.stderr  # the model was told, and answered
    assert result.stdout == "I could not write the note.\n"
    assert "plait exec has nobody to ask, so the calls it asks for are denied" in result.stderr
    denied = "<- refused: not run: denied by policy: no approver to ask (policy 'on-write')"
    assert denied in result.stderr
    session = session_of(result.stderr)
    rows = json_lines(cli("audit", session, "--json").stdout)
    assert [(r["tool"], r["approval"], r["decided_by"], r["outcome"]) for r in rows] == [
        ("t__echo", "not required", None, "ok"),
        ("t__note", "denied", "policy", "refused"),
    ]
    table = cli("audit", session).stdout.splitlines()
    assert table[1].split()[2:6] == ["t__note", "refused", "denied", "by"]


def test_exec_calls_the_tools_of_an_mcp_server_from_mcp_json(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url, top='mcp_json = ["mcp.json"]\n')
    test_server = {"command": sys.executable, "args": [str(TEST_SERVER)]}
    (cli.cwd / "mcp.json").write_text(json.dumps({"mcpServers": {"test": test_server}}))
    server.push(Step(tool_calls=[call("test__echo", text="ping")]), Step(text="It said ping."))
    result = cli("exec", "Echo ping.")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It said ping.\n"
    assert "[mcp test: ready," in result.stderr
    assert '  -> test__echo({"text": "ping"})\n  <- ok: ping\n' in result.stderr
    session = session_of(result.stderr)
    rows = json_lines(cli("audit", session, "--json").stdout)
    assert [(r["tool"], r["server"], r["outcome"]) for r in rows] == [("test__echo", "test", "ok")]


def test_exec_says_when_it_compacts_the_history(cli: Cli, server: ScriptedModelServer) -> None:
    cli.configure(server.base_url, "context_window = 1000\n\n[history]\nkeep_recent_tokens = 1\n")
    server.push(
        Step(text="Hi.", prompt_tokens=950, completion_tokens=2),
        Step(text="We greeted each other."),
        Step(text="More."),
    )
    first = cli("exec", "hello")
    assert first.returncode == 0, first.stderr
    second = cli("exec", "--session", session_of(first.stderr), "more")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "More.\n"  # the summary is not the answer
    assert "[compacting the history...]" in second.stderr
    assert "[history compacted: about " in second.stderr


def test_a_server_with_one_tool_is_ready_with_1_tool(cli: Cli, server: ScriptedModelServer) -> None:
    release = f'[mcp_servers.release]\ncommand = "{sys.executable}"\n'
    release += 'args = ["-m", "plait.cli._demo_tools"]\n'
    cli.configure(server.base_url, top=release)
    server.push(Step(text="Ready."))
    done = cli("exec", "Anything pending?")
    assert done.returncode == 0, done.stderr
    assert "[mcp release: ready, 1 tool]" in done.stderr.splitlines()


def test_verbose_exec_tells_once_when_each_server_was_ready_or_failed(
    cli: Cli, server: ScriptedModelServer
) -> None:
    broken = '[mcp_servers.broken]\ncommand = "no-such-plait-server"\n'
    good = f'[mcp_servers.good]\ncommand = "{sys.executable}"\nargs = ["{TEST_SERVER}"]\n'
    cli.configure(server.base_url, broken + good)
    server.push(Step(text="Hi."))
    result = cli("-v", "exec", "Hello?", env={"OPENAI_API_KEY": "test"})
    assert result.returncode == 0, result.stderr
    told = [line.split(" plait.cli: ")[1] for line in result.stderr.splitlines() if " ms" in line]
    by_server = {line.split(":")[0].removeprefix("MCP server "): line for line in told}
    assert len(told) == 2 and set(by_server) == {"good", "broken"}, result.stderr
    assert re.fullmatch(r"MCP server good: ready after \d+ ms, \d+ tools", by_server["good"])
    assert re.fullmatch(
        r"MCP server broken: did not start after \d+ ms: command not found: no-such-plait-server",
        by_server["broken"],
    )
