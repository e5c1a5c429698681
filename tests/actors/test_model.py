"""The model client against a real loopback Chat Completions server and the real SDK."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator

import pytest

from plait import ModelError
from plait.actors import (
    AttemptFailed,
    EffectLoop,
    ModelClient,
    ModelReply,
    ModelRequest,
    ModelSettings,
)
from plait.events import ToolCall, Usage
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

HELLO = ModelRequest(messages=[{"role": "user", "content": "hello"}])


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def settings(server: ScriptedModelServer, **overrides: object) -> ModelSettings:
    fields: dict[str, object] = {
        "base_url": server.base_url,
        "api_key": "test-key",
        "model": "test-model",
        "backoff_sec": 0.01,
        "timeout_sec": 5.0,
    }
    return ModelSettings(**{**fields, **overrides})  # type: ignore[arg-type]


@pytest.fixture
async def client(server: ScriptedModelServer) -> AsyncIterator[ModelClient]:
    client = ModelClient(settings(server))
    yield client
    await client.aclose()


async def complete(
    client: ModelClient, request: ModelRequest = HELLO
) -> tuple[ModelReply, list[str], list[AttemptFailed]]:
    texts: list[str] = []
    failures: list[AttemptFailed] = []
    reply = await client.complete(request, on_text=texts.append, on_attempt_failed=failures.append)
    return reply, texts, failures


async def fail(client: ModelClient) -> tuple[ModelError, list[AttemptFailed]]:
    failures: list[AttemptFailed] = []
    with pytest.raises(ModelError) as caught:
        await client.complete(HELLO, on_attempt_failed=failures.append)
    return caught.value, failures


async def test_text_streams_in_order(server: ScriptedModelServer, client: ModelClient) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    server.push(Step(text=text, chunk_chars=5))

    reply, texts, failures = await complete(client)

    assert len(texts) == len(text) // 5 + 1
    assert "".join(texts) == reply.text == text
    assert reply.finish_reason == "stop"
    assert reply.tool_calls == []
    assert failures == []


async def test_tool_calls_are_assembled_by_index(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    first = '{"title": "notes", "input": "remember \\"milk\\""}'
    second = '{"path": "/tmp/a b", "n": [1, 2, 3]}'
    server.push(
        Step(
            text="Let me do that.",
            tool_calls=[
                ScriptedToolCall("conv_create", first, id="call_a"),
                ScriptedToolCall("fs__read", second, id="call_b"),
            ],
        )
    )

    reply, _, _ = await complete(client)

    assert reply.text == "Let me do that."
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls == [
        ToolCall(id="call_a", name="conv_create", arguments=first),
        ToolCall(id="call_b", name="fs__read", arguments=second),
    ]


async def test_usage_is_mapped(server: ScriptedModelServer, client: ModelClient) -> None:
    server.push(Step(text="hi", prompt_tokens=120, completion_tokens=7))

    reply, _, _ = await complete(client)

    assert reply.usage == Usage(prompt_tokens=120, completion_tokens=7, total_tokens=127)


async def test_usage_is_none_when_the_server_sends_none(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    server.push(Step(text="hi", send_usage=False))

    reply, _, _ = await complete(client)

    assert reply.text == "hi"
    assert reply.usage is None


async def test_the_request_carries_messages_tools_model_and_usage_option(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "conv_list",
            "description": "List conversations.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "héllo ✓"},
    ]
    server.push(Step(text="ok"))

    await complete(client, ModelRequest(messages=messages, tools=[tool]))

    [recorded] = server.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer test-key"
    assert recorded.model == "test-model"
    assert recorded.messages == messages
    assert recorded.tools == [tool]
    assert recorded.stream
    assert recorded.body["stream_options"] == {"include_usage": True}


async def test_no_tools_key_without_tools(server: ScriptedModelServer, client: ModelClient) -> None:
    server.push(Step(text="ok"))

    await complete(client)

    assert "tools" not in server.requests[0].body


async def test_a_server_error_is_retried(server: ScriptedModelServer, client: ModelClient) -> None:
    server.push(Step(status=500, error_message="overloaded"), Step(text="recovered"))

    reply, _, failures = await complete(client)

    assert reply.text == "recovered"
    assert len(server.requests) == 2
    [failure] = failures
    assert failure.attempt == 1
    assert failure.status == 500
    assert "overloaded" in failure.error
    assert failure.retry_in_sec == pytest.approx(0.01)


async def test_rate_limits_exhaust_the_attempts(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    server.push(*[Step(status=429, error_message="slow down")] * 3)

    error, failures = await fail(client)

    assert (error.kind, error.status, error.attempts) == ("rate_limited", 429, 3)
    assert "slow down" in str(error) and "3 attempts" in str(error)
    assert [f.attempt for f in failures] == [1, 2, 3]
    assert [f.status for f in failures] == [429, 429, 429]
    # The server's retry-after-ms (1 ms) wins over the exponential backoff.
    assert [f.retry_in_sec for f in failures] == [0.001, 0.001, None]


@pytest.mark.parametrize(
    ("status", "kind", "says"),
    [
        (401, "auth", "rejected the API key (401): bad key"),
        (403, "auth", "rejected the API key (403): bad key"),
        (400, "bad_request", "refused the request (400): bad key"),
        (404, "bad_request", "refused the request (404): bad key"),
    ],
)
async def test_client_errors_are_not_retried(
    server: ScriptedModelServer, client: ModelClient, status: int, kind: str, says: str
) -> None:
    server.push(Step(status=status, error_message="bad key"), Step(text="never sent"))

    error, failures = await fail(client)

    assert (error.kind, error.status, error.attempts) == (kind, status, 1)
    assert str(error) == f"the model server {says}"
    assert failures == [AttemptFailed(1, str(error), status, None)]
    assert len(server.requests) == 1


async def test_a_silent_server_times_out(server: ScriptedModelServer) -> None:
    server.push(Step(text="x" * 100, chunk_delay=0.5))
    client = ModelClient(settings(server, timeout_sec=0.2))
    try:
        error, failures = await fail(client)
    finally:
        await client.aclose()

    assert (error.kind, error.attempts) == ("timeout", 1)
    assert str(error) == "no data from the model server for 0.2 s"
    assert len(failures) == 1


async def test_a_stream_dropped_after_text_is_not_retried(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    server.push(Step(text="partial answer", chunk_chars=4, disconnect_after=3), Step(text="no"))
    texts: list[str] = []

    with pytest.raises(ModelError) as caught:
        await client.complete(HELLO, on_text=texts.append)

    assert (caught.value.kind, caught.value.attempts) == ("disconnected", 1)
    assert "after 8 characters of text" in str(caught.value)
    assert "".join(texts) == "partial "
    assert len(server.requests) == 1


async def test_a_stream_dropped_before_text_is_retried(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    server.push(Step(text="lost", disconnect_after=1), Step(text="second try"))

    reply, texts, failures = await complete(client)

    assert reply.text == "".join(texts) == "second try"
    [failure] = failures
    assert failure.status is None
    assert "closed the stream before any reply" in failure.error


async def test_a_malformed_stream_fails(server: ScriptedModelServer, client: ModelClient) -> None:
    server.push(Step(text="hello", malformed=True), Step(text="never sent"))

    error, failures = await fail(client)

    assert (error.kind, error.attempts) == ("malformed", 1)
    assert str(error).startswith("malformed stream from the model server: ")
    assert "{not json" in str(error)
    assert len(failures) == 1


async def test_an_unreachable_server_is_retried_then_fails(server: ScriptedModelServer) -> None:
    base_url = server.base_url
    server.close()  # nothing listens on the port any more
    client = ModelClient(settings(server, base_url=base_url))
    try:
        error, failures = await fail(client)
    finally:
        await client.aclose()

    assert (error.kind, error.status, error.attempts) == ("unavailable", None, 3)
    assert str(error).startswith(f"cannot reach the model server at {base_url}")
    assert [f.retry_in_sec for f in failures] == [0.01, 0.02, None]


async def test_cancelling_closes_the_stream(
    server: ScriptedModelServer, client: ModelClient
) -> None:
    server.push(Step(text="slow " * 200, chunk_chars=5, chunk_delay=0.02))
    first_text = asyncio.Event()
    task = asyncio.create_task(client.complete(HELLO, on_text=lambda _: first_text.set()))
    await asyncio.wait_for(first_text.wait(), 5)

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.to_thread(server.wait_for_disconnects, 1)


async def test_a_missing_api_key_is_a_clear_error(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    with pytest.raises(ModelError, match="set OPENAI_API_KEY") as caught:
        ModelClient(settings(server, api_key=None))

    assert (caught.value.kind, caught.value.attempts) == ("auth", 0)


async def test_the_environment_supplies_key_and_url(
    server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    server.push(Step(text="ok"))
    client = ModelClient(ModelSettings())
    try:
        reply, _, _ = await complete(client)
    finally:
        await client.aclose()

    assert reply.text == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer env-key"
    assert server.requests[0].model == "gpt-4o-mini"


def test_usage_details_are_mapped() -> None:
    from plait.actors._stream import _usage, decode_chunk

    chunk = decode_chunk(
        '{"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 30,'
        ' "total_tokens": 80, "prompt_tokens_details": {"cached_tokens": 40},'
        ' "completion_tokens_details": {"reasoning_tokens": 12}}}'
    )
    assert chunk.usage is not None
    assert _usage(chunk.usage) == Usage(50, 30, 80, cached_tokens=40, reasoning_tokens=12)


def test_importing_the_module_does_not_import_openai() -> None:
    code = "import sys, plait.actors._model; print('openai' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_a_completion_on_the_effect_loop_is_cancelled_through_its_future(
    server: ScriptedModelServer,
) -> None:
    # How the runtime uses it: built on an actor thread, run on the effect loop, aborted by
    # cancelling the concurrent future.
    server.push(Step(text="slow " * 200, chunk_chars=5, chunk_delay=0.02), Step(text="next"))
    effects = EffectLoop()
    client = ModelClient(settings(server))
    first_text = threading.Event()
    try:
        future = effects.submit(client.complete(HELLO, on_text=lambda _: first_text.set()))
        assert first_text.wait(5)

        assert future.cancel()

        server.wait_for_disconnects(1)
        assert effects.submit(client.complete(HELLO)).result(5).text == "next"
    finally:
        effects.submit(client.aclose()).result(5)
        effects.close()


class ForwardProxy:
    """A real forwarding HTTP proxy on loopback: absolute-form requests, one connection each."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        with client, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(65536) or b"\r\n\r\n"
            method, target, rest = head.split(b" ", 2)
            url = urllib.parse.urlsplit(target.decode())
            self.targets.append(target.decode())
            with socket.create_connection((url.hostname, url.port or 80)) as upstream:
                version, _, headers = rest.partition(b"\r\n")  # one request: then close
                rest = b"%s\r\nConnection: close\r\n%s" % (version, headers)
                upstream.sendall(b"%s %s %s" % (method, url.path.encode(), rest))
                threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
                _pump(upstream, client)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    proxy = ForwardProxy()
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    yield proxy
    proxy.close()


@pytest.mark.parametrize("bypassed", [False, True], ids=["proxied", "no_proxy"])
async def test_a_proxy_in_the_environment_carries_the_requests(
    server: ScriptedModelServer,
    proxy: ForwardProxy,
    monkeypatch: pytest.MonkeyPatch,
    bypassed: bool,
) -> None:
    base_url = server.base_url
    monkeypatch.setenv("NO_PROXY", "127.0.0.1" if bypassed else "example.com")
    server.push(Step(text="through"), Step(text="again"))
    client = ModelClient(settings(server, base_url=base_url))
    try:
        first, _, _ = await complete(client)
        second, _, _ = await complete(client)
    finally:
        await client.aclose()

    assert (first.text, second.text) == ("through", "again")
    expected = [] if bypassed else [f"{base_url}/chat/completions"] * 2
    assert proxy.targets == expected
