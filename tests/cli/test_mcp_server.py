"""``plait mcp-server`` as an MCP client sees it: a real subprocess over stdio, driven by the
``mcp`` SDK's own client, against a ``ScriptedModelServer`` and the repository's test MCP
server; what it runs is in the log, so the CLI audits and replays it."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from scripted import call

from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"
ON_WRITE = f'[policy]\napproval = "on-write"\n[mcp_servers.t]\ncommand = "{sys.executable}"\n'
ON_WRITE += f'args = ["{TEST_SERVER}"]\n'
"""The test MCP server as ``t``; its calls of tools that are not read-only wait for approval."""


@contextlib.asynccontextmanager
async def plait_mcp(cli: Cli, errlog: IO[str], **callbacks: Any) -> AsyncIterator[ClientSession]:
    """A client session with ``plait mcp-server`` run in ``cli``'s directory; ``callbacks``
    are ``ClientSession``'s (an ``elicitation_callback`` declares the capability)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "plait", "mcp-server"], env=cli.env, cwd=cli.cwd
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write, read_timeout_seconds=30, **callbacks) as client,
    ):
        await client.initialize()
        yield client


async def test_the_server_info_names_plait_and_its_version(
    cli: Cli, server: ScriptedModelServer, tmp_path: Path
) -> None:
    cli.configure(server.base_url)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "plait", "mcp-server"], env=cli.env, cwd=cli.cwd
    )
    with (tmp_path / "stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=30) as client,
        ):
            started = await client.initialize()
    info = started.server_info
    assert (info.name, info.version) == ("plait", version("plait"))


def result_of(answer: types.CallToolResult) -> dict[str, Any]:
    """A tool's structured result, which its text content says too."""
    assert not answer.is_error, answer.content
    assert answer.structured_content is not None
    [text] = answer.content
    assert isinstance(text, types.TextContent)
    assert json.loads(text.text) == answer.structured_content
    return answer.structured_content


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_a_client_runs_replies_hears_progress_approves_and_the_cli_replays_it(
    cli: Cli, server: ScriptedModelServer, tmp_path: Path
) -> None:
    cli.configure(server.base_url, ON_WRITE)
    note = call("t__note", key="k", text="v")
    server.push(
        Step(text="Hello from plait.", chunk_chars=4),
        Step(text="Writing it down.", tool_calls=[note]),
        Step(text="Noted."),
    )
    asked: list[types.ElicitRequestParams] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"scope": "once"})

    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    with (tmp_path / "mcp-server.err").open("w+") as errlog:
        async with plait_mcp(
            cli, errlog, elicitation_callback=approve, logging_callback=on_log
        ) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert list(tools) == ["run", "reply", "interrupt", "history", "audit", "sessions"]
            read_only = {
                n for n, t in tools.items() if t.annotations and t.annotations.read_only_hint
            }
            assert read_only == {"history", "audit", "sessions"}
            assert set(tools["run"].input_schema["required"]) == {"prompt"}
            assert set(tools["reply"].input_schema["required"]) == {"session_id", "prompt"}

            # run: a new session, its text streamed as progress while the task runs.
            first = result_of(
                await client.call_tool(
                    "run", {"prompt": "Say hello."}, progress_callback=on_progress
                )
            )
            session = first["session_id"]
            assert first["content"] == "Hello from plait." and first["status"] == "completed"
            assert [done for done, _ in progress] == list(range(1, len(progress) + 1))
            said = "".join(message or "" for _, message in progress)
            assert "[root running]" in said and "root: Hello from plait." in said
            assert len(progress) > 3  # the text came piece by piece, as it streamed

            # reply: the same session; the note needs approval, asked by elicitation; no
            # progress token this time, so the transcript comes as log messages.
            second = result_of(
                await client.call_tool("reply", {"session_id": session[:8], "prompt": "Note it."})
            )
            assert second == {
                "session_id": session,
                "conversation_id": first["conversation_id"],
                "content": "Noted.",
                "status": "completed",
                "detail": "",
            }
            [question] = asked
            assert isinstance(question, types.ElicitRequestFormParams)
            assert 't__note {"key": "k", "text": "v"}' in question.message
            assert "policy 'on-write': t__note is not read-only" in question.message
            transcript = "".join(str(entry.data) for entry in logged)
            assert '-> t__note({"key": "k", "text": "v"})' in transcript
            assert "<- ok: noted k" in transcript and "Noted." in transcript

            # The read-only tools answer what the CLI prints.
            listed = result_of(await client.call_tool("sessions", {}))["sessions"]
            assert [row["session_id"] for row in listed] == [session]
            history = result_of(await client.call_tool("history", {"session_id": session}))
            audit = result_of(await client.call_tool("audit", {"session_id": session}))
        sent = server.requests[-1].messages  # the instructions, as plait exec's say
        assert sent[1]["content"].startswith(f"The working directory is {cli.cwd.resolve()}.")
        assert sent[2:5] == [  # one session: the model saw it all
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": "Hello from plait."},
            {"role": "user", "content": "Note it."},
        ]

    assert history["messages"] == json_lines(cli("history", session, "--json").stdout)
    assert audit["calls"] == json_lines(cli("audit", session, "--json").stdout)
    [row] = audit["calls"]
    assert (row["tool"], row["approval"], row["decided_by"], row["outcome"]) == (
        "t__note",
        "approved",
        "client:mcp",
        "ok",
    )
    replayed = cli("replay", session)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "no difference" in replayed.stdout


async def test_a_client_that_cannot_be_asked_has_its_calls_denied(
    cli: Cli, server: ScriptedModelServer, tmp_path: Path
) -> None:
    cli.configure(server.base_url, ON_WRITE)
    server.push(
        Step(tool_calls=[call("t__note", key="k", text="v")]), Step(text="I could not write it.")
    )
    with (tmp_path / "mcp-server.err").open("w+") as errlog:
        async with plait_mcp(cli, errlog) as client:  # no elicitation_callback: no capability
            answer = result_of(await client.call_tool("run", {"prompt": "Note it."}))
            assert (answer["status"], answer["content"]) == ("completed", "I could not write it.")
    rows = json_lines(cli("audit", answer["session_id"], "--json").stdout)
    assert [(r["tool"], r["approval"], r["decided_by"], r["outcome"]) for r in rows] == [
        ("t__note", "denied", "mcp-server", "refused"),
    ]
    denied = server.requests[-1].messages[-1]
    assert denied["role"] == "tool" and "elicitation capability" in denied["content"]


async def test_bad_arguments_are_one_clear_line_not_a_traceback(
    cli: Cli, server: ScriptedModelServer, tmp_path: Path
) -> None:
    cli.configure(server.base_url)
    with (tmp_path / "mcp-server.err").open("w+") as errlog:
        async with plait_mcp(cli, errlog) as client:
            cases = {
                "run": {"prompt": "x", "storage_policy": "forever"},
                "run ": {"prompt": "x", "approval_policy": "sometimes"},
                "reply": {"session_id": "nope", "prompt": "x"},
                "history": {"session_id": "nope"},
            }
            said = {}
            for tool, arguments in cases.items():
                answer = await client.call_tool(tool.strip(), arguments)
                assert answer.is_error
                [text] = answer.content
                assert isinstance(text, types.TextContent)
                said[tool] = text.text
    prefix = "Error executing tool {}: "  # the SDK's, before the tool's own message
    assert said["run"] == prefix.format("run") + (
        "storage policy 'forever': expected full, headers_only, none or ttl:SECONDS "
        "(e.g. ttl:3600, ttl:7d)"
    )
    assert (
        "approval_policy\n  Input should be 'never', 'on-request', 'on-write' or " in said["run "]
    )
    unknown = "no session in the store matches 'nope' (see `plait sessions`)"
    assert said["reply"] == prefix.format("reply") + unknown
    assert said["history"] == prefix.format("history") + unknown
    assert "Traceback" not in "".join(said.values())
    assert server.requests == []


async def test_interrupt_ends_a_running_task_and_its_call_answers_interrupted(
    cli: Cli, server: ScriptedModelServer, tmp_path: Path
) -> None:
    cli.configure(server.base_url)
    server.push(Step(text="Counting very slowly", chunk_chars=1, chunk_delay=30))  # never ends
    running = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if "[root running]" in (message or ""):
            running.set()

    answers: list[dict[str, Any]] = []
    with (tmp_path / "mcp-server.err").open("w+") as errlog:
        async with plait_mcp(cli, errlog) as client:

            async def run() -> None:
                answer = await client.call_tool(
                    "run", {"prompt": "Count."}, progress_callback=on_progress
                )
                answers.append(result_of(answer))

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(run)
                    await running.wait()
                    await anyio.to_thread.run_sync(server.wait_for_requests, 1)  # it streams
                    [listed] = result_of(await client.call_tool("sessions", {}))["sessions"]
                    stopped = await client.call_tool(
                        "interrupt", {"session_id": listed["session_id"]}
                    )
                    assert result_of(stopped) == {
                        "session_id": listed["session_id"],
                        "interrupted": True,
                    }
            again = await client.call_tool("interrupt", {"session_id": listed["session_id"]})
            assert result_of(again)["interrupted"] is False  # nothing runs any more
    [answer] = answers
    assert answer["status"] == "interrupted" and answer["content"] is None


async def test_over_streamable_http(cli: Cli, server: ScriptedModelServer) -> None:
    cli.configure(server.base_url)
    server.push(Step(text="Hello over HTTP."))
    process = subprocess.Popen(
        [sys.executable, "-m", "plait", "mcp-server", "--http", "0"],
        cwd=cli.cwd,
        env=cli.env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        with anyio.fail_after(30):  # the line comes once the socket listens
            line = await anyio.to_thread.run_sync(process.stderr.readline, abandon_on_cancel=True)
        assert "listening on " in line, line
        url = line.split("listening on ")[1].split(": store")[0]
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write, read_timeout_seconds=30) as client,
        ):
            await client.initialize()
            answer = result_of(await client.call_tool("run", {"prompt": "Hello?"}))
        assert (answer["status"], answer["content"]) == ("completed", "Hello over HTTP.")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.stderr is not None
        with process.stderr as stderr:
            said = stderr.read()
        assert process.wait(30) == 130, said  # as any plait command stopped by SIGINT
        assert "Traceback" not in said
        assert (
            said.splitlines()[-1]
            == f"plait: stopped by SIGINT: session {answer['session_id']} handed back"
        )
    replayed = cli("replay", answer["session_id"])
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
