"""Input checked at the door, text from outside mended: a lone surrogate (what undecodable
bytes become) is refused when given, and read as U+FFFD, recorded so, when a tool, an MCP
server or the model sends it (docs/event-log.md#text)."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from scripted import (
    assert_histories_valid,
    call,
    local_mcp_servers,
    one_mcp_call,
    replayed,
    runtime_for,
)

import plait
from plait import ApprovalDecision, FunctionCallOutput, InputText, InvalidInputError
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    Event,
    ModelResponded,
    TaskEnqueued,
    ToolApprovalDecided,
    ToolCallCompleted,
)
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

BAD = "a \ud800 b"
"""Text with a lone surrogate at offset 2."""


def enqueued(events: list[Event]) -> int:
    return sum(isinstance(e.body, TaskEnqueued) for e in events)


@pytest.mark.parametrize(
    ("prompt", "where"),
    [
        (BAD, "prompt is not valid text: character 2 is U+D800"),
        ([InputText("fine"), InputText("x\udcff")], "prompt[1].text is not valid text"),
        ([FunctionCallOutput("c1", "\udc80")], "prompt[0].output is not valid text: character 0"),
    ],
)
def test_a_prompt_that_is_not_text_is_refused_at_once_and_the_session_goes_on(
    tmp_path: Path, prompt: Any, where: str
) -> None:
    with (
        ScriptedModelServer([Step(text="still here")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with pytest.raises(InvalidInputError, match=f"^{re.escape(where)}"):
            session.run(prompt, timeout=30)
        with pytest.raises(InvalidInputError):
            session.submit(prompt)
        with pytest.raises(InvalidInputError, match="conversation_id is not valid text"):
            session.submit("hello", conversation_id="c\udcff")
        assert enqueued(runtime.store.read(session.session_id)) == 0  # nothing was queued
        outcome = session.run("hello", timeout=30)
        assert outcome.last_assistant_message == "still here"
        assert len(server.requests) == 1


async def test_asubmit_and_arun_refuse_it_on_the_callers_loop(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="async still here")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with pytest.raises(InvalidInputError, match=r"^prompt is not valid text"):
            await session.asubmit(BAD)
        with pytest.raises(InvalidInputError, match=r"^prompt\[0\]\.text is not valid text"):
            await session.arun([InputText(BAD)], timeout=30)
        outcome = await session.arun("hello", timeout=30)
        assert outcome.last_assistant_message == "async still here"
        assert enqueued(runtime.store.read(session.session_id)) == 1


def test_instructions_that_are_not_text_are_refused(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="ok")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        with pytest.raises(InvalidInputError, match=r"^base_instructions is not valid text"):
            runtime.start_session(base_instructions=BAD)
        with pytest.raises(InvalidInputError, match=r"^user_instructions is not valid text"):
            runtime.start_session(user_instructions=BAD)
        with pytest.raises(InvalidInputError, match=r"^mcp_allowlist\[1\] is not valid text"):
            runtime.start_session(mcp_allowlist=["t__echo", "t__\udcff"])
        assert runtime.store.streams() == []  # no session was started
        session = runtime.start_session()
        with pytest.raises(InvalidInputError, match=r"^user_instructions is not valid text"):
            session.change_context(user_instructions=BAD)
        with pytest.raises(InvalidInputError, match=r"^base_instructions is not valid text"):
            session.change_context(base_instructions=BAD)
        assert enqueued(runtime.store.read(session.session_id)) == 0
        assert session.run("hello", timeout=30).ok


@plait.tool(read_only=True)
def garbled(kind: str) -> Any:
    """Return text with a lone surrogate, as a string or inside an object."""
    return BAD if kind == "text" else {"note": BAD, "list": ["\udcff"]}


def test_a_function_tool_returning_a_lone_surrogate_is_recorded_mended(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("garbled", kind="text"), call("garbled", kind="object")]),
        Step(text="done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, tools=[garbled]) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("go", timeout=30)
        session.close()
    assert outcome.last_assistant_message == "done"
    events = replayed(tmp_path, session.session_id)  # and replay is clean
    outputs = [
        (e.body.output, e.body.outcome) for e in events if isinstance(e.body, ToolCallCompleted)
    ]
    assert outputs == [
        ("a \ufffd b", "ok"),
        ('{"note":"a \ufffd b","list":["\ufffd"]}', "ok"),
    ]
    answers = [m["content"] for m in server.requests[1].messages if m["role"] == "tool"]
    assert answers == [o for o, _ in outputs]  # the model was shown what was recorded


# An MCP server speaking the protocol by hand over stdio, as a server written in another
# language may: its one tool's answer holds an undecodable byte and a lone surrogate's escape.
RAW_SERVER = r"""
import json, sys

TOOL = {"name": "say", "description": "Say something.", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True}}
for line in sys.stdin.buffer:
    message = json.loads(line)
    if "id" not in message:
        continue
    method, answer = message["method"], {}
    if method == "initialize":
        answer = {"protocolVersion": message["params"]["protocolVersion"], "capabilities":
                  {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        answer = {"tools": [TOOL]}
    elif method == "tools/call":
        answer = {"content": [{"type": "text", "text": "TEXT"}], "isError": False}
    data = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": answer}).encode()
    if method == "tools/call" and sys.argv[1:] == ["cut"]:
        data = data[:-9]  # a line cut short: not JSON at all
    sys.stdout.buffer.write(data.replace(b"TEXT", b"x \xff y \\ud800 z \\ud83d\\ude00") + b"\n")
    sys.stdout.buffer.flush()
"""


def test_an_mcp_servers_undecodable_text_is_recorded_mended(tmp_path: Path) -> None:
    server_py = tmp_path / "raw_server.py"
    server_py.write_text(RAW_SERVER)
    config = McpServerConfig(command=sys.executable, args=[str(server_py)])
    script = [Step(tool_calls=[call("raw__say")]), Step(text="heard")]
    answer, completed = one_mcp_call(tmp_path, config, script)
    assert answer == "heard"
    assert (completed.output, completed.outcome) == ("x \ufffd y \ufffd z \U0001f600", "ok")


def test_an_mcp_servers_answer_that_is_not_json_fails_its_call_at_once(tmp_path: Path) -> None:
    server_py = tmp_path / "raw_server.py"
    server_py.write_text(RAW_SERVER)
    config = McpServerConfig(command=sys.executable, args=[str(server_py), "cut"])
    script = [Step(tool_calls=[call("raw__say")]), Step(text="it failed")]
    # Within the call's own timeout (60 s): it fails at once.
    answer, completed = one_mcp_call(tmp_path, config, script, timeout=30)
    assert (answer, completed.outcome) == ("it failed", "error")
    assert completed.output.startswith(
        "raw__say failed: MCP server 'raw' sent a reply that is not JSON (EOF while parsing"
    ), completed.output


class _GarbledModel(BaseHTTPRequestHandler):
    """A model server whose streamed reply holds an undecodable byte and a lone surrogate's
    escape, in its text and in a tool call's arguments."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        first = self.server.answered == 0  # type: ignore[attr-defined]
        self.server.answered += 1  # type: ignore[attr-defined]
        if first:
            delta = (
                b'{"content":"x \xed\xa0\x80 y \\ud800 z","tool_calls":[{"index":0,"id":"c1",'
                b'"function":{"name":"conv_list","arguments":"{\\"a\\": \\"\\udcff\\"}"}}]}'
            )
            reason = b'"tool_calls"'
        else:
            delta, reason = b'{"content":"fine \\\\ud800"}', b'"stop"'
        body = (
            b'data: {"choices":[{"delta":' + delta + b"}]}\n\n"
            b'data: {"choices":[{"delta":{},"finish_reason":' + reason + b"}]}\n\n"
            b"data: [DONE]\n\n"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def garbled_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GarbledModel)
    server.answered = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_the_models_undecodable_text_is_recorded_mended(tmp_path: Path, garbled_model: str) -> None:
    settings = ModelSettings(base_url=garbled_model, api_key="test", model="garbled")
    with Runtime(
        tmp_path / "plait.db", RuntimeSettings(model=settings, workdir=tmp_path)
    ) as runtime:
        session = runtime.start_session()
        outcome = session.run("go", timeout=30)
        session.close()
    # The escaped backslash before ``ud800`` in the last reply is text, not a surrogate.
    assert outcome.last_assistant_message == "fine \\ud800"
    events = replayed(tmp_path, session.session_id)
    first = next(e.body for e in events if isinstance(e.body, ModelResponded))
    assert first.text == "x \ufffd\ufffd\ufffd y \ufffd z"
    assert [c.arguments for c in first.tool_calls] == ['{"a": "\ufffd"}']
    assert_histories_valid(events)


def test_an_instruction_file_that_is_not_utf8_is_refused_to_the_model(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_bytes(b"be \xff brief")
    script = [
        Step(
            tool_calls=[call("conv_create", user_instruction="x", base_instruction_file="bad.txt")]
        ),
        Step(text="could not"),
    ]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("go", timeout=30)
        session.close()
    assert outcome.last_assistant_message == "could not"
    events = replayed(tmp_path, session.session_id)
    [completed] = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert "'bad.txt' is not UTF-8 text (byte 0xff at offset 3)" in str(completed.output)


def test_an_approvers_decision_that_is_not_text_is_a_denial_saying_so(tmp_path: Path) -> None:
    def approver(request: Any) -> ApprovalDecision:
        return ApprovalDecision(approved=True, reason="fine \udcff")

    script = [Step(tool_calls=[call("t__echo", text="hi")]), Step(text="denied then")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server,
            tmp_path,
            mcp_servers=local_mcp_servers(),
            approval_policy="untrusted",
            approver=approver,
        ) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("echo", timeout=60)
        session.close()
    assert outcome.last_assistant_message == "denied then"
    events = replayed(tmp_path, session.session_id)
    [decided] = [e.body for e in events if isinstance(e.body, ToolApprovalDecided)]
    assert (decided.approved, decided.decided_by) == (False, "error")
    assert decided.reason.endswith(
        "reason is not valid text: character 5 cannot be encoded as UTF-8"
    )
