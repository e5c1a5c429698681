"""A scripted OpenAI-compatible model server on loopback, for testing code that calls a model.

``ScriptedModelServer`` speaks two of OpenAI's protocols, Chat Completions (``POST
/v1/chat/completions``) and Responses (``POST /v1/responses``), each streamed as server-sent
events or answered as one JSON object, with usage, and answers each request, of either, with
the next ``Step`` of its script. It records every request, so a test can assert
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
    ScriptedModelServer(steps, quirks=PROFILES["llama-cpp-python"])

A request a quirk refuses (or fails on, as ``no_content_crash`` does) is recorded but takes
no step of the script, so a client that asks again differently gets the step. A request with
``max_tokens`` (or ``max_completion_tokens``) N gets at most ``4 * N`` characters of a step's
text, and ``finish_reason: "length"`` if cut; a step with ``endless=True`` ignores the cap and
streams until the client hangs up.

On the Responses API a step's ``reasoning`` is a reasoning item (its summary; its
``encrypted_content`` too when the request's ``include`` asks), a cap is ``max_output_tokens``
and a cut answer ``incomplete``; the server keeps each response (unless ``store: false``) for a
later ``previous_response_id``, and refuses with OpenAI's HTTP 400 one it does not keep, an
item given by an id it does not keep, and a ``function_call_output`` for no call before it.
A new server keeps none. Quirks are of Chat Completions servers: they leave it alone.

The server is stdlib ``http.server`` in a daemon thread and never writes to stderr.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import msgspec

from plait import _scripted_responses as responses
from plait import _scripted_wire as wire
from plait._scripted_wire import PROFILES, QUIRKS, ScriptedToolCall, Step

__all__ = [
    "PROFILES",
    "QUIRKS",
    "RecordedRequest",
    "ScriptedModelServer",
    "ScriptedToolCall",
    "Step",
]

CREATED = 1_700_000_000
"""The ``created`` stamp of every response: fixed, so recorded runs are deterministic."""

_DROPPED = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


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

    @property
    def wire(self) -> str:
        """The API asked: ``"chat"`` (``/chat/completions``), ``"responses"`` (``/responses``),
        or ``""`` for any other path."""
        route = self.path.rstrip("/")
        return {"/v1/chat/completions": "chat", "/v1/responses": "responses"}.get(route, "")

    @property
    def input(self) -> list[dict[str, Any]]:
        """A Responses request's input items, in order (a string input as one user message)."""
        return responses.input_items(self.body) or []

    @property
    def instructions(self) -> str | None:
        """A Responses request's instructions (its system prompt), or None."""
        instructions = self.body.get("instructions")
        return instructions if isinstance(instructions, str) else None


class ScriptedModelServer:
    """An OpenAI Chat Completions and Responses server on 127.0.0.1 that answers from a script
    of ``Step``s."""

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        model: str = "scripted-model",
        quirks: Iterable[str] = (),
    ) -> None:
        self.model = model
        """The model name the server reports in its answers and in ``GET /v1/models``."""
        if isinstance(quirks, str):  # a lone name would otherwise be read letter by letter
            raise TypeError(f"quirks: expected a collection of names, got the string {quirks!r}")
        self._quirks = frozenset(quirks)
        unknown = sorted(self._quirks - QUIRKS.keys())
        if unknown:
            raise ValueError(f"unknown quirk {unknown[0]!r}: expected one of {', '.join(QUIRKS)}")
        self._cond = threading.Condition()
        self._steps: deque[Step] = deque(steps)
        self._requests: list[RecordedRequest] = []
        self._served = 0  # requests answered from the script, of either API
        self._calls = 0  # default tool call ids handed out
        self._disconnects = 0
        self._kept: dict[str, list[dict[str, Any]]] = {}  # response id: all its items
        self._kept_items: dict[str, dict[str, Any]] = {}  # a kept item's id: the item
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
    def quirks(self) -> frozenset[str]:
        """The quirks it imitates, names from ``QUIRKS``; fixed for the server's life."""
        return self._quirks

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

    def admit(
        self, request: RecordedRequest, wants_step: bool
    ) -> tuple[int, Step | None, list[str]]:
        """Record a request and take its step: (request number, step or None, tool call ids).
        (Its request handler's, as ``track``, ``paused`` and ``client_dropped`` are.)"""
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

    def keep(self, response_id: str, items: list[dict[str, Any]]) -> None:
        """Keep a response's items, those of the responses it follows, its input and its
        output, for a later ``previous_response_id``; and each of them by its id."""
        with self._cond:
            self._kept[response_id] = items
            self._kept_items.update((item["id"], item) for item in items if "id" in item)

    def kept(self, response_id: str) -> list[dict[str, Any]] | None:
        """The items of a kept response, or None if the server keeps none of that id."""
        with self._cond:
            items = self._kept.get(response_id)
            return None if items is None else list(items)

    def kept_item(self, item_id: str) -> dict[str, Any] | None:
        """A kept item, found by its id."""
        with self._cond:
            return self._kept_items.get(item_id)

    def track(self, conn: socket.socket, live: bool) -> None:
        """Keep ``conn`` while ``live``, to shut it at ``close``."""
        with self._cond:
            if not live:
                self._connections.discard(conn)
            elif self._closing.is_set():  # accepted just before close() took its snapshot
                conn.shutdown(socket.SHUT_RDWR)
            else:
                self._connections.add(conn)

    def paused(self, delay: float) -> bool:
        """Wait ``delay`` seconds between chunks; return whether the server closed meanwhile."""
        return self._closing.wait(delay)

    @property
    def closing(self) -> bool:
        """Whether ``close`` has begun (an endless answer stops then)."""
        return self._closing.is_set()

    def client_dropped(self) -> None:
        """Count a client that hung up mid-reply."""
        with self._cond:
            if not self._closing.is_set():
                self._disconnects += 1
                self._cond.notify_all()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # as real servers: a thousand clients connecting at once wait
    script: ScriptedModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up is a scripted or expected event, not a server fault to print.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 lets streams use chunked encoding, as OpenAI's do: a stream cut short is then
    # an incomplete body the client notices, not the clean end of a connection-delimited one.
    protocol_version = "HTTP/1.1"
    # Each streamed chunk goes out at once, as from real servers (on a kept connection,
    # Nagle's algorithm would hold it for the client's delayed ACK: 40 ms).
    disable_nagle_algorithm = True

    @property
    def script(self) -> ScriptedModelServer:
        return cast(_HTTPServer, self.server).script

    def setup(self) -> None:
        super().setup()
        self.script.track(self.connection, live=True)

    def finish(self) -> None:
        self.script.track(self.connection, live=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep quiet: a test's output is its own."""

    def do_GET(self) -> None:
        self.script.admit(self._recorded({}), wants_step=False)
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
        request = self._recorded(body if isinstance(body, dict) else {})
        route = self.path.rstrip("/")
        if route == "/v1/chat/completions":
            self._chat(request, raw, body)
        elif route == "/v1/responses":
            self._respond(request, raw, body)
        else:
            self.script.admit(request, wants_step=False)
            self._send_error(404, f"ScriptedModelServer: no route POST {self.path}")

    def _chat(self, request: RecordedRequest, raw: bytes, body: Any) -> None:
        """Answer a Chat Completions request from the script, as the quirks would."""
        quirks = self.script.quirks
        refused = wire.refusal(quirks, body) if isinstance(body, dict) else None
        crashed = refused is None and isinstance(body, dict) and wire.crashes(quirks, body)
        wants_step = isinstance(body, dict) and refused is None and not crashed
        n, step, ids = self.script.admit(request, wants_step=wants_step)
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": CREATED}
        head["model"] = self.script.model
        if not isinstance(body, dict):
            self._send_error(400, "ScriptedModelServer: the body is not a JSON object")
        elif refused is not None:
            self._send_error(*refused)
        elif crashed:
            self._crash(request.stream)
        elif step is None or step.status is not None:
            self._send_scripted_error(n, step)
        else:
            step = step if step.endless and request.stream else wire.capped(step, body)
            ids, usage = ids[: len(step.tool_calls)], wire.usage(step, len(raw))
            if not request.stream:
                self._send_whole(step, lambda: wire.completion(step, head, ids, usage, quirks))
                return
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            head["object"] = "chat.completion.chunk"
            if step.endless:
                self._stream_endless(step, map(_sse, wire.endless(step, head, with_usage)))
            else:
                chunks = wire.chunks(step, head, ids, usage, with_usage, quirks)
                # A failed stream ends with its error chunk, as OpenAI's does.
                done = b"" if step.failure is not None else b"data: [DONE]\n\n"
                self._stream(step, [_sse(chunk) for chunk in chunks], done)

    def _respond(self, request: RecordedRequest, raw: bytes, body: Any) -> None:
        """Answer a Responses request from the script, and keep the response unless the
        request says ``store: false``."""
        refused, context = None, []
        if isinstance(body, dict):
            previous_id = body.get("previous_response_id")
            previous = self.script.kept(previous_id) if isinstance(previous_id, str) else None
            refused = responses.problem(body, previous, self.script.kept_item, self.script.quirks)
            context = [*(previous or []), *(responses.input_items(body) or [])]
        n, step, ids = self.script.admit(request, isinstance(body, dict) and refused is None)
        head = {"id": f"resp_{n}", "object": "response", "created_at": CREATED}
        head["model"] = self.script.model
        if not isinstance(body, dict):
            self._send_error(400, "ScriptedModelServer: the body is not a JSON object")
        elif refused is not None:
            self._send_json(*refused)
        elif step is None or step.status is not None:
            self._send_scripted_error(n, step)
        elif step.endless and request.stream:
            self._stream_endless(step, map(_sse, responses.endless(step, head, body)))
        else:
            step = wire.cut(step, body.get("max_output_tokens"))
            ids = ids[: len(step.tool_calls)]
            usage = responses.usage(step, len(raw)) if step.send_usage else None
            events = responses.events(step, head, body, ids, usage)
            final = events[-1]["response"]
            if final["status"] != "failed" and body.get("store", True) is not False:
                self.script.keep(final["id"], [*context, *final["output"]])
            if request.stream:
                self._stream(step, [_sse(event) for event in events], b"")
            else:
                self._send_whole(step, lambda: final)

    def _send_scripted_error(self, n: int, step: Step | None) -> None:
        """Answer as the script says when it has no answer: exhausted, or a step's error."""
        if step is None:
            plural = "" if n == 1 else "s"
            self._send_error(
                500, f"ScriptedModelServer: script exhausted after {n} request{plural}"
            )
        elif step.status is not None:
            self._send_error(step.status, step.error_message)

    def _send_whole(self, step: Step, answer: Callable[[], Any]) -> None:
        """Answer a request that did not ask for a stream: ``answer()``, unless the step
        fails or drops the connection."""
        if step.failure is not None:
            self._send_error(500, step.failure)
        elif step.disconnect_after is None:
            self._send_json(200, answer())
        else:
            self.close_connection = True  # no answer at all

    def _recorded(self, body: dict[str, Any]) -> RecordedRequest:
        headers = {name.lower(): value for name, value in self.headers.items()}
        return RecordedRequest(self.path, headers, body)

    def _send_error(self, status: int, message: str) -> None:
        # retry-after-ms keeps the SDK's backoff before retrying a 429 to a millisecond.
        headers = {"retry-after-ms": "1"} if status == 429 else {}
        self._send_json(status, wire.error_body(status, message), headers)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = msgspec.json.encode(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _crash(self, stream: bool) -> None:
        """Fail as a server whose handler raises once it has begun its answer: a stream ends
        after its headers, without a byte (and without its last HTTP chunk); a whole answer
        is an HTTP 500 with the exception's text."""
        if not stream:
            self._send_error(500, "'content'")
            return
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(*_DROPPED):
            self.wfile.flush()

    def _stream(self, step: Step, frames: list[bytes], done: bytes) -> None:
        """Stream ``frames``, then ``done`` (if any), as the step says: slowly, cut or
        garbled."""
        lines = list(frames)
        if step.malformed:
            lines = [*lines[:1], b"data: {not json\n\n"]
        elif done:
            lines.append(done)
        if step.disconnect_after is not None:
            lines = lines[: min(step.disconnect_after, len(frames))]
        # A whole stream keeps the connection for the next request, as real servers do.
        cut = step.malformed or step.disconnect_after is not None
        self.close_connection = self.close_connection or cut  # or the client asked to
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            for i, line in enumerate(lines):
                if i and step.chunk_delay and self.script.paused(step.chunk_delay):
                    return
                self._write(line)
            if step.disconnect_after is None:
                self._write(b"")  # the last HTTP chunk; a dropped stream never gets it
        except _DROPPED:
            self.script.client_dropped()

    def _stream_endless(self, step: Step, frames: Iterator[bytes]) -> None:
        """Stream ``frames`` until the client hangs up or the server closes."""
        self.close_connection = True  # the answer never ends: the connection cannot be reused
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for i, frame in enumerate(frames):
                if i and step.chunk_delay and self.script.paused(step.chunk_delay):
                    return
                if self.script.closing:
                    return
                self._write(frame)
        except _DROPPED:
            self.script.client_dropped()

    def _write(self, data: bytes) -> None:
        """Send one HTTP chunk and flush it."""
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def _sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event: a Responses event is named by its ``type``, as OpenAI's are."""
    data = b"data: " + msgspec.json.encode(payload) + b"\n\n"
    kind = payload.get("type")
    return b"event: %s\n%s" % (kind.encode(), data) if isinstance(kind, str) else data
