"""A streamable-HTTP server's undecodable text is read mended and recorded so; a reply that is
not JSON-RPC even mended fails its call at once, naming the server (docs/event-log.md#text)."""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from scripted import call, one_mcp_call

from plait.actors.mcp import McpConnection, McpServerConfig
from plait.testing import Step

TEXTS = {
    "undecodable bytes": (b"x \xff y \xed\xa0\x80 z", "x \ufffd y \ufffd\ufffd\ufffd z"),
    # A pair is one character, and an escaped backslash before ``ud800`` is text.
    "lone surrogate escapes": (
        rb"x \ud800 y \udfff z \ud83d\ude00 \\ud800",
        "x \ufffd y \ufffd z \U0001f600 \\ud800",
    ),
    "both": (b"x \xff y \\ud800 z", "x \ufffd y \ufffd z"),
}
"""The text part of ``say``'s answer as sent (inside a JSON string), and as read."""

REPLIES = ["json", "json, gzip", "event stream", "event stream, CR line ends"]
"""How the server frames its answer: the body itself, or an event's ``data:`` line."""

TOOL = {
    "name": "say",
    "inputSchema": {"type": "object", "properties": {"case": {}, "reply": {}}},
    "annotations": {"readOnlyHint": True},
}


def _body(message_id: Any, method: str, params: dict[str, Any]) -> bytes:
    """The JSON-RPC answer to a request, as bytes: ``say`` answers the case asked for."""
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    else:
        result = {"content": [{"type": "text", "text": "TEXT"}], "isError": False}
    data = json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}).encode()
    case = params.get("arguments", {}).get("case")
    if case == "truncated":
        return data[:-2]
    if case == "not JSON-RPC":
        return b'{"hello": "\xff"}'
    return data.replace(b"TEXT", TEXTS[case][0]) if case else data


class _RawMcp(BaseHTTPRequestHandler):
    """An MCP server speaking streamable HTTP by hand, as one written in another language may:
    stateless (no session id, no GET stream), each answer framed as ``say`` is asked to."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:  # a notification
            self._send(202, b"")
            return
        params = message.get("params") or {}
        body = _body(message["id"], message["method"], params)
        reply = params.get("arguments", {}).get("reply", "json")
        if reply.startswith("event stream"):
            end = b"\r" if reply.endswith("CR line ends") else b"\n"
            event = b"event: message" + end + b"data: " + body + end * 2
            self._send(200, event, {"Content-Type": "text/event-stream"})
        elif reply == "json, gzip":
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
            self._send(200, gzip.compress(body), headers)
        else:
            self._send(200, body, {"Content-Type": "application/json"})

    def do_GET(self) -> None:
        self._send(405, b"")

    do_DELETE = do_GET

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def raw_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RawMcp)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/mcp"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def raw(loop, raw_url: str) -> Iterator[McpConnection]:
    """A connection to the hand-written server; a call ends in a timeout after 10 s."""
    conn = McpConnection("raw", McpServerConfig(url=raw_url, tool_timeout_sec=10))
    loop.run(conn.start())
    yield conn
    loop.run(conn.close())


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("case", TEXTS)
def test_undecodable_text_in_a_reply_is_read_mended(loop, raw, case: str, reply: str) -> None:
    result = loop.run(raw.call("say", {"case": case, "reply": reply}), timeout=30)
    assert (result.outcome, result.output) == ("ok", TEXTS[case][1])


@pytest.mark.parametrize("reply", ["json", "event stream"])
@pytest.mark.parametrize(
    ("case", "says"),
    [
        pytest.param("truncated", r"is not JSON \(EOF while parsing an object at .*\)", id="cut"),
        pytest.param("not JSON-RPC", "is not a JSON-RPC message", id="not JSON-RPC"),
    ],
)
def test_a_reply_that_is_not_json_rpc_even_mended_fails_the_call_at_once(
    loop, raw, case: str, says: str, reply: str
) -> None:
    result = loop.run(raw.call("say", {"case": case, "reply": reply}), timeout=30)
    assert result.outcome == "error"
    said = "raw__say failed: MCP server 'raw' sent a reply that "
    assert re.fullmatch(re.escape(said) + says, result.output), result.output
    # One bad reply does not end the connection.
    after = loop.run(raw.call("say", {"case": "both", "reply": reply}), timeout=30)
    assert (after.outcome, after.output) == ("ok", TEXTS["both"][1])


@pytest.mark.parametrize("reply", ["json", "event stream"])
def test_the_mended_text_is_what_the_log_records(tmp_path: Path, raw_url: str, reply: str) -> None:
    script = [Step(tool_calls=[call("raw__say", case="both", reply=reply)]), Step(text="heard")]
    answer, completed = one_mcp_call(tmp_path, McpServerConfig(url=raw_url), script)
    assert answer == "heard"
    assert (completed.output, completed.outcome) == ("x \ufffd y \ufffd z", "ok")
