"""A scripted OpenAI-compatible model server on loopback, for testing code that calls a model.

``ScriptedModelServer`` speaks the Chat Completions protocol (``POST /v1/chat/completions``,
streamed as server-sent events or answered as one JSON object, with usage) and answers each
request with the next ``Step`` of its script. It records every request, so a test can assert
on what the model was shown, and it misbehaves on cue: HTTP errors, dropped connections,
malformed chunks, slow streams::

    from openai import OpenAI
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    with ScriptedModelServer([
        Step(tool_calls=[ScriptedToolCall("conv_create", '{"title": "notes"}')]),
        Step(text="Created."),
    ]) as server:
        client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        run_my_agent(client)
        client.close()
        second = server.requests[1]
        assert second.messages[-1]["role"] == "tool"

Real servers that call themselves OpenAI-compatible differ from OpenAI's; ``quirks`` makes the
server behave as they do (``QUIRKS`` lists them; docs/models.md says which server does what)::

    ScriptedModelServer(steps, quirks={"strict_null_content", "no_usage"})  # like llama.cpp's

A request a quirk refuses is recorded but takes no step of the script, so a client that asks
again differently gets the step. A request with ``max_tokens`` (or ``max_completion_tokens``)
N gets at most ``4 * N`` characters of a step's text, and ``finish_reason: "length"`` if cut.

The server is stdlib ``http.server`` in a daemon thread and never writes to stderr.
"""

from __future__ import annotations

import contextlib
import math
import socket
import sys
import threading
from collections import deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import msgspec

__all__ = ["QUIRKS", "RecordedRequest", "ScriptedModelServer", "ScriptedToolCall", "Step"]

CREATED = 1_700_000_000
"""The ``created`` stamp of every response: fixed, so recorded runs are deterministic."""

_DROPPED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)

QUIRKS: dict[str, str] = {
    "strict_null_content": "HTTP 500 for a message whose content is null (llama.cpp's server)",
    "no_usage": "no usage, even when stream_options.include_usage asks for it",
    "no_stream_options": "HTTP 400 for a request with stream_options",
    "max_completion_tokens_only": "HTTP 400 for max_tokens (OpenAI's reasoning models)",
    "tools_required": "HTTP 400 for tool calls or results in a request that offers no tools",
    "reasoning_required": "HTTP 400 for an assistant message with tool calls and no "
    "reasoning_content (DeepSeek's thinking mode)",
    "reasoning_field": "reasoning streamed as delta.reasoning, not delta.reasoning_content",
    "object_arguments": "each tool call whole in one delta, its arguments a JSON object",
    "no_tool_index": "tool-call deltas without index",
    "no_call_id": "tool calls without id",
    "calls_in_one_chunk": "all of a reply's tool calls whole in one chunk",
}
"""The quirks ``ScriptedModelServer`` can imitate, each with what it does."""


class ScriptedToolCall(msgspec.Struct, frozen=True):
    """A function call the scripted model makes."""

    name: str
    """The function's name, e.g. ``conv_create``."""
    arguments: str = "{}"
    """The arguments as a JSON string; streamed in about three fragments."""
    id: str | None = None
    """The call id; default ``call_<n>``, ``n`` counting calls (from 1) over the server's life."""


class Step(msgspec.Struct, frozen=True):
    """One scripted answer: the reply to one chat completion request."""

    text: str = ""
    """Assistant text, streamed in chunks of ``chunk_chars`` characters."""
    tool_calls: list[ScriptedToolCall] = []
    """Function calls, after the text."""
    finish_reason: str | None = None
    """Default ``"tool_calls"`` if there are tool calls, else ``"stop"``."""
    prompt_tokens: int | None = None
    """Reported prompt tokens; default a rough count, the request body's bytes // 4."""
    completion_tokens: int | None = None
    """Reported completion tokens; default ``len(text) // 4`` plus 10 per tool call."""
    send_usage: bool = True
    """Report usage: the last chunk if the client asked (``stream_options.include_usage``), or
    the ``usage`` field of a non-streamed answer."""
    chunk_chars: int = 8
    """Characters of text per streamed chunk."""
    chunk_delay: float = 0.0
    """Seconds to wait between streamed chunks (simulated model latency)."""
    status: int | None = None
    """Answer with this HTTP error status and an OpenAI-style error body instead."""
    error_message: str = "scripted error"
    """The error body's message when ``status`` is set."""
    disconnect_after: int | None = None
    """Stream this many chunks, then drop the connection without ``[DONE]`` (a non-streamed
    request gets no answer at all)."""
    malformed: bool = False
    """After the first chunk, send the line ``data: {not json`` and end the stream."""
    reasoning: str = ""
    """Reasoning text, streamed before the text as ``reasoning_content`` deltas (or
    ``reasoning``, under the ``reasoning_field`` quirk); counted in the completion tokens."""


class RecordedRequest(msgspec.Struct, frozen=True):
    """A request as the server received it: what the model was shown."""

    path: str
    """The request path, e.g. ``/v1/chat/completions``."""
    headers: dict[str, str]
    """The request headers, names lower-cased."""
    body: dict[str, Any]
    """The whole JSON body (empty if there was none, or it was not a JSON object)."""

    @property
    def model(self) -> str:
        """The model the client asked for."""
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages sent, in order."""
        return cast(list[dict[str, Any]], self.body.get("messages", []))

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The tool definitions offered, or None if the request offered none."""
        return cast(list[dict[str, Any]] | None, self.body.get("tools"))

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed answer."""
        return bool(self.body.get("stream", False))


class ScriptedModelServer:
    """An OpenAI Chat Completions server on 127.0.0.1 that answers from a script of ``Step``s."""

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        model: str = "scripted-model",
        quirks: Iterable[str] = (),
    ) -> None:
        self.model = model
        """The model name the server reports in its answers and in ``GET /v1/models``."""
        unknown = sorted(set(quirks) - set(QUIRKS))
        if unknown:
            raise ValueError(f"unknown quirk {unknown[0]!r}: expected one of {', '.join(QUIRKS)}")
        self.quirks = frozenset(quirks)
        """The quirks it imitates (``QUIRKS``)."""
        self._cond = threading.Condition()
        self._steps: deque[Step] = deque(steps)
        self._requests: list[RecordedRequest] = []
        self._served = 0  # chat completion requests answered from the script
        self._calls = 0  # default tool call ids handed out
        self._disconnects = 0
        self._connections: set[socket.socket] = set()
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedModelServer:
        """Bind a free loopback port and serve in a daemon thread; a no-op if started."""
        if self._httpd is None:
            self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
            self._httpd.script = self
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"ScriptedModelServer:{self._httpd.server_port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, cut open connections and wait for their threads; idempotent."""
        if self._httpd is None or self._closing.is_set():
            return
        self._closing.set()
        self._httpd.shutdown()
        with self._cond:
            connections = list(self._connections)
        for conn in connections:  # idle keep-alive connections would otherwise block the join
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, ``http://127.0.0.1:PORT/v1``."""
        if self._httpd is None:
            raise RuntimeError("ScriptedModelServer: call start() (or use `with`) first")
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def push(self, *steps: Step) -> None:
        """Append steps to the script (safe while requests are being served)."""
        with self._cond:
            self._steps.extend(steps)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._cond:
            return list(self._requests)

    @property
    def disconnects(self) -> int:
        """How many times a client closed the connection before a streamed reply ended."""
        with self._cond:
            return self._disconnects

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``count`` requests have arrived and return all of them."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(
                    f"ScriptedModelServer: waited {timeout} s for {count} requests, "
                    f"{len(self._requests)} arrived"
                )
            return list(self._requests)

    def wait_for_disconnects(self, count: int, timeout: float = 10.0) -> None:
        """Block until clients have dropped ``count`` streamed replies in total."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._disconnects >= count, timeout):
                raise TimeoutError(
                    f"ScriptedModelServer: waited {timeout} s for {count} client disconnects, "
                    f"{self._disconnects} happened"
                )

    def _admit(
        self, request: RecordedRequest, wants_step: bool
    ) -> tuple[int, Step | None, list[str]]:
        """Record a request and take its step: (request number, step or None, tool call ids)."""
        with self._cond:
            self._requests.append(request)
            self._cond.notify_all()
            if not wants_step or not self._steps:
                return self._served, None, []
            step = self._steps.popleft()
            self._served += 1
            ids = []
            for call in step.tool_calls:
                if call.id is None:
                    self._calls += 1
                ids.append(call.id or f"call_{self._calls}")
            return self._served, step, ids

    def _track(self, conn: socket.socket, live: bool) -> None:
        with self._cond:
            if not live:
                self._connections.discard(conn)
            elif self._closing.is_set():  # accepted just before close() took its snapshot
                conn.shutdown(socket.SHUT_RDWR)
            else:
                self._connections.add(conn)

    def _client_dropped(self) -> None:
        with self._cond:
            if not self._closing.is_set():
                self._disconnects += 1
                self._cond.notify_all()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    script: ScriptedModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up is a scripted or expected event, not a server fault to print.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


_ERROR_KINDS = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _error_body(status: int, message: str) -> dict[str, Any]:
    default = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, code = _ERROR_KINDS.get(status, default)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _pieces(text: str, size: int) -> list[str]:
    size = max(size, 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _finish(step: Step) -> str:
    if step.finish_reason is not None:
        return step.finish_reason
    return "tool_calls" if step.tool_calls else "stop"


def _usage(step: Step, request_bytes: int) -> dict[str, Any]:
    prompt = request_bytes // 4 if step.prompt_tokens is None else step.prompt_tokens
    reasoning = len(step.reasoning) // 4
    completion = step.completion_tokens
    if completion is None:
        completion = len(step.text) // 4 + 10 * len(step.tool_calls) + reasoning
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def _refusal(quirks: frozenset[str], body: dict[str, Any]) -> tuple[int, str] | None:
    """The error status and message a quirk answers ``body`` with, if one refuses it."""
    messages = body.get("messages")
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    if "strict_null_content" in quirks:
        for i, message in enumerate(messages):
            if "content" in message and message["content"] is None:
                return 500, f"messages[{i}]: content must be a string or an array, not null"
    if "no_stream_options" in quirks and "stream_options" in body:
        return 400, "Unrecognized request argument supplied: stream_options"
    if "max_completion_tokens_only" in quirks and "max_tokens" in body:
        return 400, (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
    calls_or_results = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    if "tools_required" in quirks and calls_or_results and not body.get("tools"):
        return 400, "tools must be given when messages contain tool calls or results"
    if "reasoning_required" in quirks:
        for i, message in enumerate(messages):
            thought = message.get("reasoning_content")
            if message.get("tool_calls") and not (isinstance(thought, str) and thought):
                return 400, (
                    f"Missing `reasoning_content` field in the assistant message at message "
                    f"index {i}"
                )
    return None


def _capped(step: Step, body: dict[str, Any]) -> Step:
    """``step`` as a server honouring the request's output cap would answer it."""
    cap = body.get("max_tokens", body.get("max_completion_tokens"))
    if not isinstance(cap, int) or isinstance(cap, bool) or len(step.text) <= 4 * cap:
        return step
    return msgspec.structs.replace(
        step,
        text=step.text[: 4 * cap],
        tool_calls=[],
        finish_reason="length",
        completion_tokens=cap,
    )


def _completion(
    step: Step, head: dict[str, Any], ids: list[str], usage: dict[str, Any], quirks: frozenset[str]
) -> Any:
    message: dict[str, Any] = {"role": "assistant", "refusal": None}
    message["content"] = step.text or (None if step.tool_calls else "")
    if step.reasoning:
        message[_reasoning_field(quirks)] = step.reasoning
    if step.tool_calls:
        message["tool_calls"] = _calls(step, ids, quirks)
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(step)}
    sends_usage = step.send_usage and "no_usage" not in quirks
    return {**head, "choices": [choice], **({"usage": usage} if sends_usage else {})}


def _reasoning_field(quirks: frozenset[str]) -> str:
    return "reasoning" if "reasoning_field" in quirks else "reasoning_content"


def _calls(step: Step, ids: list[str], quirks: frozenset[str]) -> list[dict[str, Any]]:
    """The step's tool calls, whole, as the quirks shape them."""
    calls = []
    for i, (call, id_) in enumerate(zip(step.tool_calls, ids, strict=True)):
        arguments: Any = call.arguments
        if "object_arguments" in quirks:
            with contextlib.suppress(msgspec.DecodeError):
                arguments = msgspec.json.decode(call.arguments)
        entry = {"index": i, "id": id_, "type": "function"}
        entry["function"] = {"name": call.name, "arguments": arguments}
        calls.append(_without(entry, quirks))
    return calls


def _without(entry: dict[str, Any], quirks: frozenset[str]) -> dict[str, Any]:
    """A tool-call delta less the keys the quirks leave out."""
    if "no_tool_index" in quirks:
        entry.pop("index", None)
    if "no_call_id" in quirks:
        entry.pop("id", None)
    return entry


def _chunks(
    step: Step,
    head: dict[str, Any],
    ids: list[str],
    usage: dict[str, Any],
    with_usage: bool,
    quirks: frozenset[str],
) -> list[dict[str, Any]]:
    with_usage = with_usage and "no_usage" not in quirks

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        # With include_usage OpenAI sends `"usage": null` on every chunk but the last.
        return {**head, "choices": [choice], **({"usage": None} if with_usage else {})}

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    field = _reasoning_field(quirks)
    chunks += [chunk({field: piece}) for piece in _pieces(step.reasoning, step.chunk_chars)]
    chunks += [chunk({"content": piece}) for piece in _pieces(step.text, step.chunk_chars)]
    if quirks & {"object_arguments", "calls_in_one_chunk"}:
        whole = _calls(step, ids, quirks)
        groups = [whole] if "calls_in_one_chunk" in quirks else [[call] for call in whole]
        chunks += [chunk({"tool_calls": group}) for group in groups if group]
    else:
        for i, (call, id_) in enumerate(zip(step.tool_calls, ids, strict=True)):
            start = {"index": i, "id": id_, "type": "function"}
            start["function"] = {"name": call.name, "arguments": ""}
            chunks.append(chunk({"tool_calls": [_without(start, quirks)]}))
            for piece in _pieces(call.arguments, math.ceil(len(call.arguments) / 3)):
                more = _without({"index": i, "function": {"arguments": piece}}, quirks)
                chunks.append(chunk({"tool_calls": [more]}))
    chunks.append(chunk({}, _finish(step)))
    if with_usage and step.send_usage:
        chunks.append({**head, "choices": [], "usage": usage})
    return chunks


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 lets streams use chunked encoding, as OpenAI's do: a stream cut short is then
    # an incomplete body the client notices, not the clean end of a connection-delimited one.
    protocol_version = "HTTP/1.1"

    @property
    def script(self) -> ScriptedModelServer:
        return cast(_HTTPServer, self.server).script

    def setup(self) -> None:
        super().setup()
        self.script._track(self.connection, live=True)

    def finish(self) -> None:
        self.script._track(self.connection, live=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep quiet: a test's output is its own."""

    def do_GET(self) -> None:
        self.script._admit(self._recorded({}), wants_step=False)
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": self.script.model, "object": "model", "created": CREATED}
            self._send_json(200, {"object": "list", "data": [{**model, "owned_by": "plait"}]})
        else:
            self._send_error(404, f"ScriptedModelServer: no route GET {self.path}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = msgspec.json.decode(raw) if raw else {}
        except msgspec.DecodeError:
            body = None
        is_chat = self.path.rstrip("/") == "/v1/chat/completions"
        request = self._recorded(body if isinstance(body, dict) else {})
        quirks = self.script.quirks
        refused = _refusal(quirks, body) if is_chat and isinstance(body, dict) else None
        wants_step = is_chat and isinstance(body, dict) and refused is None
        n, step, ids = self.script._admit(request, wants_step=wants_step)
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": CREATED}
        head["model"] = self.script.model
        if not is_chat:
            self._send_error(404, f"ScriptedModelServer: no route POST {self.path}")
        elif not isinstance(body, dict):
            self._send_error(400, "ScriptedModelServer: the body is not a JSON object")
        elif refused is not None:
            self._send_error(*refused)
        elif step is None:
            plural = "" if n == 1 else "s"
            self._send_error(
                500, f"ScriptedModelServer: script exhausted after {n} request{plural}"
            )
        elif step.status is not None:
            self._send_error(step.status, step.error_message)
        else:
            step = _capped(step, body)
            ids, usage = ids[: len(step.tool_calls)], _usage(step, len(raw))
            if not request.stream:
                if step.disconnect_after is None:
                    self._send_json(200, _completion(step, head, ids, usage, quirks))
                else:
                    self.close_connection = True  # no answer at all
                return
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            head["object"] = "chat.completion.chunk"
            self._stream(step, _chunks(step, head, ids, usage, with_usage, quirks))

    def _recorded(self, body: dict[str, Any]) -> RecordedRequest:
        headers = {name.lower(): value for name, value in self.headers.items()}
        return RecordedRequest(self.path, headers, body)

    def _send_error(self, status: int, message: str) -> None:
        # retry-after-ms keeps the SDK's backoff before retrying a 429 to a millisecond.
        headers = {"retry-after-ms": "1"} if status == 429 else {}
        self._send_json(status, _error_body(status, message), headers)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = msgspec.json.encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, step: Step, chunks: list[dict[str, Any]]) -> None:
        lines = [b"data: " + msgspec.json.encode(chunk) + b"\n\n" for chunk in chunks]
        if step.malformed:
            lines = [*lines[:1], b"data: {not json\n\n"]
        else:
            lines.append(b"data: [DONE]\n\n")
        if step.disconnect_after is not None:
            lines = lines[: min(step.disconnect_after, len(chunks))]
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for i, line in enumerate(lines):
                if i and step.chunk_delay and self.script._closing.wait(step.chunk_delay):
                    return
                self._write(line)
            if step.disconnect_after is None:
                self._write(b"")  # the last HTTP chunk; a dropped stream never gets it
        except _DROPPED:
            self.script._client_dropped()

    def _write(self, data: bytes) -> None:
        """Send one HTTP chunk and flush it."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
