"""``ScriptedModelServer`` through the real ``openai`` SDK: what it streams, records and breaks."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionChunk

from plait.testing import (
    PROFILES,
    QUIRKS,
    RecordedRequest,
    ScriptedModelServer,
    ScriptedToolCall,
    Step,
)

HELLO: list[Any] = [{"role": "user", "content": "hello"}]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def client(server: ScriptedModelServer) -> Iterator[OpenAI]:
    client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    yield client
    client.close()


def stream_chat(client: OpenAI, **kwargs: Any) -> list[ChatCompletionChunk]:
    kwargs.setdefault("messages", HELLO)
    with client.chat.completions.create(model="m", stream=True, **kwargs) as stream:
        return list(stream)


def text_of(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def tool_calls_of(chunks: list[ChatCompletionChunk]) -> dict[int, dict[str, str]]:
    """Assemble streamed tool calls by index, as a client must."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    return calls


@pytest.mark.parametrize(
    ("text", "chunk_chars"),
    [("Hello, world! How are you?", 8), ("é日本語🙂 mixed", 3), ("x", 1), ("", 8), ("a" * 100, 7)],
)
def test_streamed_text_reassembles_exactly(
    server: ScriptedModelServer, client: OpenAI, text: str, chunk_chars: int
) -> None:
    server.push(Step(text=text, chunk_chars=chunk_chars))
    chunks = stream_chat(client)
    assert text_of(chunks) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {(c.id, c.created, c.model, c.object) for c in chunks} == {
        ("chatcmpl-1", 1_700_000_000, "scripted-model", "chat.completion.chunk")
    }


def test_streamed_tool_calls_assemble_by_index(server: ScriptedModelServer, client: OpenAI) -> None:
    arguments = json.dumps({"title": "Quarterly notes", "tags": ["a", "b"], "n": 12})
    server.push(
        Step(
            text="Let me do that.",
            tool_calls=[
                ScriptedToolCall("conv_create", arguments),
                ScriptedToolCall("conv_list", id="call_explicit"),
                ScriptedToolCall("conv_get", '{"id": 3}'),
            ],
        ),
        Step(tool_calls=[ScriptedToolCall("conv_get")]),
    )
    chunks = stream_chat(client)
    assert text_of(chunks) == "Let me do that."
    assert tool_calls_of(chunks) == {
        0: {"id": "call_1", "name": "conv_create", "arguments": arguments},
        1: {"id": "call_explicit", "name": "conv_list", "arguments": "{}"},
        2: {"id": "call_2", "name": "conv_get", "arguments": '{"id": 3}'},
    }
    fragments = [
        c.choices[0].delta.tool_calls[0]
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    ]
    assert sum(f.index == 0 and f.id is None for f in fragments) == 3  # arguments in pieces
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # Default ids count calls over the server's life, not per request.
    assert tool_calls_of(stream_chat(client))[0]["id"] == "call_3"


@pytest.mark.parametrize(
    ("include_usage", "send_usage", "expected"),
    [(True, True, True), (False, True, False), (True, False, False)],
)
def test_usage_chunk_comes_only_when_asked_for_and_scripted(
    server: ScriptedModelServer,
    client: OpenAI,
    include_usage: bool,
    send_usage: bool,
    expected: bool,
) -> None:
    server.push(Step(text="x" * 40, send_usage=send_usage))
    options: Any = {"include_usage": True} if include_usage else openai.omit
    chunks = stream_chat(client, stream_options=options)
    usages = [c.usage for c in chunks if c.usage is not None]
    if not expected:
        assert usages == []
        assert chunks[-1].choices[0].finish_reason == "stop"
        return
    assert chunks[-1].choices == []
    assert usages == [chunks[-1].usage]
    sent = len(json.dumps(server.requests[0].body, separators=(",", ":")))
    assert usages[0].completion_tokens == 10
    assert usages[0].prompt_tokens == pytest.approx(sent // 4, abs=3)
    assert usages[0].total_tokens == usages[0].prompt_tokens + 10


def test_scripted_usage_and_finish_reason_are_reported(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="cut", finish_reason="length", prompt_tokens=1000, completion_tokens=7))
    chunks = stream_chat(client, stream_options={"include_usage": True})
    assert chunks[-2].choices[0].finish_reason == "length"
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1000, 7, 1007)


def test_non_streaming_response(server: ScriptedModelServer, client: OpenAI) -> None:
    server.push(
        Step(text="Plain answer.", prompt_tokens=5, completion_tokens=3),
        Step(tool_calls=[ScriptedToolCall("conv_create", '{"a": 1}')]),
        Step(text="no usage", send_usage=False),
    )
    first = client.chat.completions.create(model="m", messages=HELLO)
    assert (first.id, first.object, first.created) == (
        "chatcmpl-1",
        "chat.completion",
        1_700_000_000,
    )
    assert first.choices[0].message.content == "Plain answer."
    assert first.choices[0].message.tool_calls is None
    assert first.choices[0].finish_reason == "stop"
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.completion_tokens) == (5, 3)

    second = client.chat.completions.create(model="m", messages=HELLO)
    message = second.choices[0].message
    assert message.content is None
    assert message.tool_calls is not None
    [call] = message.tool_calls
    assert call.type == "function"
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_1",
        "conv_create",
        '{"a": 1}',
    )
    assert second.choices[0].finish_reason == "tool_calls"

    assert client.chat.completions.create(model="m", messages=HELLO).usage is None


def test_records_what_the_model_was_shown(server: ScriptedModelServer, client: OpenAI) -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "conv_create",
                "description": "Create a conversation.",
                "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
            },
        }
    ]
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Make one."},
    ]
    server.push(Step(text="a"), Step(text="b"))
    stream_chat(client, messages=messages, tools=tools)
    client.chat.completions.create(model="other", messages=messages[:1])

    first, second = server.wait_for_requests(2)
    assert isinstance(first, RecordedRequest)
    assert first.path == "/v1/chat/completions"
    assert (first.model, first.messages, first.tools, first.stream) == ("m", messages, tools, True)
    assert first.headers["authorization"] == "Bearer test"
    assert first.headers["content-type"] == "application/json"
    assert (second.model, second.messages, second.tools, second.stream) == (
        "other",
        messages[:1],
        None,
        False,
    )
    assert server.requests == [first, second]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_http_errors_map_to_sdk_exceptions(
    server: ScriptedModelServer,
    client: OpenAI,
    status: int,
    error: type[openai.APIStatusError],
    stream: bool,
) -> None:
    server.push(Step(status=status, error_message=f"scripted {status}"))
    with pytest.raises(error) as raised:
        client.chat.completions.create(model="m", messages=HELLO, stream=stream)
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"] == f"scripted {status}"
    assert f"scripted {status}" in str(raised.value)


def test_rate_limit_is_retried_after_a_millisecond(server: ScriptedModelServer) -> None:
    server.push(Step(status=429), Step(status=429), Step(text="finally"))
    with OpenAI(base_url=server.base_url, api_key="test", max_retries=2) as client:
        answer = client.chat.completions.create(model="m", messages=HELLO)
    assert answer.choices[0].message.content == "finally"
    retries = [r.headers["x-stainless-retry-count"] for r in server.requests]
    assert retries == ["0", "1", "2"]


@pytest.mark.parametrize("after", [0, 1, 3, 100])
def test_midstream_disconnect_makes_the_iteration_raise(
    server: ScriptedModelServer, client: OpenAI, after: int
) -> None:
    server.push(Step(text="abcdefghijklmnopqrstuvwxyz", chunk_chars=4, disconnect_after=after))
    received: list[ChatCompletionChunk] = []
    with (
        pytest.raises(openai.APIConnectionError) as raised,
        client.chat.completions.create(model="m", messages=HELLO, stream=True) as stream,
    ):
        for chunk in stream:
            received.append(chunk)
    assert len(received) == min(after, 9)  # role chunk + 7 text chunks + finish chunk
    assert "incomplete chunked read" in str(raised.value.__cause__)


def test_non_streamed_disconnect_raises_a_connection_error(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="never sent", disconnect_after=0))
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=HELLO)


def test_malformed_chunk_raises(server: ScriptedModelServer, client: OpenAI) -> None:
    server.push(Step(text="hello there", malformed=True))
    received: list[ChatCompletionChunk] = []
    with (
        pytest.raises(json.JSONDecodeError),
        client.chat.completions.create(model="m", messages=HELLO, stream=True) as stream,
    ):
        for chunk in stream:
            received.append(chunk)
    assert [c.choices[0].delta.role for c in received] == ["assistant"]


def test_exhausted_script_answers_500_and_records_the_request(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="one"))
    stream_chat(client)
    with pytest.raises(openai.InternalServerError, match="script exhausted after 1 request"):
        client.chat.completions.create(model="m", messages=HELLO)
    assert len(server.requests) == 2
    server.push(Step(text="two"))
    assert text_of(stream_chat(client)) == "two"


def test_unknown_paths_answer_404_and_models_are_listed(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    with pytest.raises(openai.NotFoundError, match="no route POST /v1/completions"):
        client.completions.create(model="m", prompt="hi")
    assert [m.id for m in client.models.list()] == ["scripted-model"]
    assert [r.path for r in server.requests] == ["/v1/completions", "/v1/models"]


def test_waits_time_out_naming_what_arrived(server: ScriptedModelServer, client: OpenAI) -> None:
    server.push(Step(text="a"))
    stream_chat(client)
    with pytest.raises(TimeoutError, match="for 2 requests, 1 arrived"):
        server.wait_for_requests(2, timeout=0.05)
    with pytest.raises(TimeoutError, match="for 1 client disconnects, 0 happened"):
        server.wait_for_disconnects(1, timeout=0.05)


def test_a_client_closing_midstream_is_counted_as_a_disconnect(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="x" * 400, chunk_chars=1, chunk_delay=0.05), Step(text="whole"))
    with client.chat.completions.create(model="m", messages=HELLO, stream=True) as stream:
        for n, _ in enumerate(stream):
            if n == 2:
                break
    server.wait_for_disconnects(1)
    assert server.disconnects == 1
    assert text_of(stream_chat(client)) == "whole"  # a stream read to its end is no disconnect
    assert server.disconnects == 1


async def test_async_client_streams_too(server: ScriptedModelServer) -> None:
    server.push(Step(text="async hello", tool_calls=[ScriptedToolCall("f", '{"x": 1}')]))
    async with AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client:
        stream = await client.chat.completions.create(model="m", messages=HELLO, stream=True)
        async with stream:
            chunks = [chunk async for chunk in stream]
    assert text_of(chunks) == "async hello"
    assert tool_calls_of(chunks) == {0: {"id": "call_1", "name": "f", "arguments": '{"x": 1}'}}


def test_lifecycle() -> None:
    server = ScriptedModelServer([Step(text="hi")])
    with pytest.raises(RuntimeError, match="start"):
        _ = server.base_url
    assert server.start() is server.start()
    # A client left open keeps an idle keep-alive connection; close() must not wait on it.
    client = OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    assert client.chat.completions.create(model="m", messages=HELLO).choices[0].message.content
    server.close()
    server.close()
    client.close()


# --- quirks: servers other than OpenAI's ---------------------------------------------------

CALLED: dict[str, Any] = {
    "role": "assistant",
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
RESULT: dict[str, Any] = {"role": "tool", "tool_call_id": "a", "content": "done"}
TOOLS: list[Any] = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def raw_post(server: ScriptedModelServer, **body: Any) -> tuple[int, str]:
    """POST a chat request (streamed unless ``stream=False``) with plain HTTP: status, body."""
    import http.client

    port = int(server.base_url.split(":")[2].split("/")[0])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    payload = {"model": "m", "messages": HELLO, "stream": True, **body}
    connection.request("POST", "/v1/chat/completions", json.dumps(payload))
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, text


def raw_chunks(server: ScriptedModelServer, **body: Any) -> list[Any]:
    """The ``data:`` payloads of a streamed answer, decoded."""
    status, text = raw_post(server, **body)
    assert status == 200, text
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return [json.loads(d) for d in data if d != "[DONE]"]


def raw_answer(server: ScriptedModelServer, **body: Any) -> Any:
    """A non-streamed answer, decoded."""
    status, text = raw_post(server, stream=False, **body)
    assert status == 200, text
    return json.loads(text)


def deltas_of(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in chunks if c["choices"]]


def raw_text(chunks: list[Any]) -> str:
    return "".join(d.get("content", "") for d in deltas_of(chunks))


def raw_call_deltas(chunks: list[Any]) -> list[dict[str, Any]]:
    return [call for d in deltas_of(chunks) for call in d.get("tool_calls", [])]


def test_quirks_are_checked_and_kept() -> None:
    with pytest.raises(ValueError, match="unknown quirk 'no_such': expected one of strict_null_"):
        ScriptedModelServer(quirks={"no_usage", "no_such"})
    with pytest.raises(TypeError, match="got the string 'no_usage'"):
        ScriptedModelServer(quirks="no_usage")
    server = ScriptedModelServer(quirks=["no_usage", "no_call_id", "no_usage"])
    assert server.quirks == frozenset({"no_usage", "no_call_id"})
    with pytest.raises(AttributeError):
        server.quirks = frozenset()  # type: ignore[misc]
    assert set(QUIRKS) >= server.quirks and all(isinstance(d, str) for d in QUIRKS.values())


@pytest.mark.parametrize(
    ("quirk", "body", "status", "said"),
    [
        ("strict_null_content", {"messages": [*HELLO, {"role": "assistant", "content": None}]},
         500, "messages[1]: content must be a string or an array, not null"),
        ("no_stream_options", {"stream_options": {"include_usage": True}},
         400, "Unrecognized request argument supplied: stream_options"),
        ("max_completion_tokens_only", {"max_tokens": 5},
         400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
              "Use 'max_completion_tokens' instead."),
        ("tools_required", {"messages": [*HELLO, RESULT]}, 400, "tools must be given"),
        ("tools_required", {"messages": [*HELLO, CALLED]}, 400, "tools must be given"),
        ("reasoning_required", {"messages": [*HELLO, CALLED, RESULT]},
         400, "Missing `reasoning_content` field in the assistant message at message index 1"),
        ("reasoning_required", {"messages": [*HELLO, {**CALLED, "reasoning_content": ""}]},
         400, "Missing `reasoning_content` field in the assistant message at message index 1"),
        ("missing_content", {"messages": [*HELLO, CALLED, RESULT]}, 500, "Missing 'content'"),
        ("null_content_invalid", {"messages": [*HELLO, {**CALLED, "content": None}, RESULT]},
         500, "messages.1.ChatCompletionRequestAssistantMessage.content\n  Input should be a "
              "valid string [type=string_type, input_value=None]"),
        ("empty_content_refused", {"messages": [*HELLO, {**CALLED, "content": ""}, RESULT]},
         400, "messages.1: text content blocks must be non-empty"),
    ],
)  # fmt: skip
def test_a_refusal_takes_no_step_of_the_script(
    quirk: str, body: dict[str, Any], status: int, said: str
) -> None:
    with ScriptedModelServer([Step(text="the step")], quirks={quirk}) as server:
        refused, error = raw_post(server, **body)
        chunks = raw_chunks(server)
        recorded = server.wait_for_requests(2)
    assert refused == status
    assert said in json.loads(error)["error"]["message"]
    assert recorded[0].body["messages"] == body.get("messages", HELLO)
    assert raw_text(chunks) == "the step"


@pytest.mark.parametrize(
    ("quirk", "body"),
    [
        ("strict_null_content", {"messages": [*HELLO, CALLED, RESULT], "tools": TOOLS}),
        ("no_stream_options", {}),
        ("max_completion_tokens_only", {"max_completion_tokens": 100}),
        ("tools_required", {"messages": [*HELLO, CALLED, RESULT], "tools": TOOLS}),
        ("reasoning_required",
         {"messages": [*HELLO, {**CALLED, "reasoning_content": "f first"}, RESULT]}),
        ("missing_content", {"messages": [*HELLO, {**CALLED, "content": ""}, RESULT]}),
        ("null_content_invalid", {"messages": [*HELLO, {**CALLED, "content": ""}, RESULT]}),
        ("no_content_crash", {"messages": [*HELLO, {**CALLED, "content": None}, RESULT]}),
        ("empty_content_refused", {"messages": [*HELLO, CALLED, RESULT]}),
        ("empty_content_refused", {"messages": [*HELLO, {**CALLED, "content": None}, RESULT]}),
    ],
)  # fmt: skip
def test_a_request_the_quirk_allows_is_answered(quirk: str, body: dict[str, Any]) -> None:
    with ScriptedModelServer([Step(text="the step")], quirks={quirk}) as server:
        assert raw_text(raw_chunks(server, **body)) == "the step"


def test_a_message_without_content_crashes_a_stream_after_its_headers() -> None:
    import http.client

    called = {"messages": [*HELLO, CALLED, RESULT]}
    with ScriptedModelServer([Step(text="the step")], quirks={"no_content_crash"}) as server:
        with pytest.raises(http.client.IncompleteRead) as crashed:
            raw_post(server, **called)
        assert crashed.value.partial == b""  # not a byte of an answer after the HTTP 200
        status, body = raw_post(server, stream=False, **called)
        assert (status, json.loads(body)["error"]["message"]) == (500, "'content'")
        assert raw_text(raw_chunks(server)) == "the step"  # the crashes took no step
        assert len(server.requests) == 3


def test_profiles_are_sets_of_known_quirks() -> None:
    assert set(PROFILES) == {"llama-cpp-python", "llama.cpp-old"}
    assert all(quirks <= QUIRKS.keys() for quirks in PROFILES.values())


def test_a_refusal_is_an_error_the_openai_client_raises() -> None:
    null: list[Any] = [*HELLO, {"role": "assistant", "content": None}]
    quirks = {"no_stream_options", "strict_null_content"}
    with ScriptedModelServer([Step(text="x")], quirks=quirks) as strict:
        client = OpenAI(base_url=strict.base_url, api_key="test", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="stream_options"):
            stream_chat(client, stream_options={"include_usage": True})
        with pytest.raises(openai.InternalServerError, match=r"messages\[1\]: content must"):
            client.chat.completions.create(model="m", messages=null)
        assert client.chat.completions.create(model="m", messages=HELLO).choices[0].message
        client.close()


@pytest.mark.parametrize("stream", [True, False])
def test_no_usage_sends_none_even_when_asked(stream: bool) -> None:
    with ScriptedModelServer([Step(text="hi")], quirks={"no_usage"}) as server:
        if stream:
            payloads = raw_chunks(server, stream_options={"include_usage": True})
        else:
            payloads = [raw_answer(server)]
    assert payloads and all("usage" not in p for p in payloads)  # nor "usage": null


@pytest.mark.parametrize(
    ("quirks", "shape"),
    [
        ({"object_arguments"}, [[{"index": 0, "id": "call_1", "args": {"a": 1}}],
                                [{"index": 1, "id": "call_2", "args": "{oops"}]]),
        ({"calls_in_one_chunk"}, [[{"index": 0, "id": "call_1", "args": '{"a": 1}'},
                                   {"index": 1, "id": "call_2", "args": "{oops"}]]),
        ({"calls_in_one_chunk", "object_arguments"},
         [[{"index": 0, "id": "call_1", "args": {"a": 1}},
           {"index": 1, "id": "call_2", "args": "{oops"}]]),
        ({"calls_in_one_chunk", "no_tool_index", "no_call_id"},
         [[{"args": '{"a": 1}'}, {"args": "{oops"}]]),
    ],
)  # fmt: skip
def test_tool_calls_come_whole_in_the_shapes_the_quirks_give(
    quirks: set[str], shape: list[list[dict[str, Any]]]
) -> None:
    calls = [ScriptedToolCall("f", '{"a": 1}'), ScriptedToolCall("g", "{oops")]
    with ScriptedModelServer([Step(tool_calls=calls)], quirks=quirks) as server:
        chunks = raw_chunks(server)
    groups = [d["tool_calls"] for d in deltas_of(chunks) if d.get("tool_calls")]
    seen = [
        [
            {k: v for k, v in {**d, "args": d["function"]["arguments"]}.items()
             if k in ("index", "id", "args")}
            for d in group
        ]
        for group in groups
    ]  # fmt: skip
    assert seen == shape
    assert [d["function"]["name"] for group in groups for d in group] == ["f", "g"]


@pytest.mark.parametrize(("quirk", "missing"), [("no_tool_index", "index"), ("no_call_id", "id")])
def test_tool_call_deltas_can_lack_index_or_id(quirk: str, missing: str) -> None:
    arguments = '{"title": "notes"}'
    step = Step(tool_calls=[ScriptedToolCall("f", arguments)])
    with ScriptedModelServer([step], quirks={quirk}) as server:
        deltas = raw_call_deltas(raw_chunks(server))
    assert len(deltas) == 4  # the call's start, then its arguments in three pieces
    assert all(missing not in d for d in deltas)
    assert deltas[0]["function"]["name"] == "f"
    assert "".join(d["function"]["arguments"] for d in deltas) == arguments


@pytest.mark.parametrize(
    ("quirks", "seen"),
    [
        (set(), ("call_1", '{"a": 1}')),
        ({"no_call_id"}, (None, '{"a": 1}')),
        ({"object_arguments"}, ("call_1", {"a": 1})),
    ],
)
def test_a_non_streamed_answer_takes_the_quirks_too(
    quirks: set[str], seen: tuple[str | None, Any]
) -> None:
    step = Step(tool_calls=[ScriptedToolCall("f", '{"a": 1}')])
    with ScriptedModelServer([step], quirks=quirks) as server:
        [call] = raw_answer(server)["choices"][0]["message"]["tool_calls"]
    assert (call.get("id"), call["function"]["arguments"]) == seen
    assert (call["type"], call["function"]["name"]) == ("function", "f")


@pytest.mark.parametrize("quirks", [set(), {"reasoning_field"}])
def test_reasoning_comes_before_the_text(quirks: set[str]) -> None:
    field, other = (
        ("reasoning", "reasoning_content") if quirks else ("reasoning_content", "reasoning")
    )
    step = Step(text="The answer: 42", reasoning="think it over", chunk_chars=5)
    with ScriptedModelServer([step, step], quirks=quirks) as server:
        chunks = raw_chunks(server, stream_options={"include_usage": True})
        answer = raw_answer(server)
    deltas = deltas_of(chunks)
    assert [(k, d[k]) for d in deltas for k in (field, "content") if d.get(k)] == [
        (field, "think"), (field, " it o"), (field, "ver"),
        ("content", "The a"), ("content", "nswer"), ("content", ": 42"),
    ]  # fmt: skip
    assert all(other not in d for d in deltas)
    message = answer["choices"][0]["message"]
    assert (message[field], message["content"], other in message) == (
        "think it over",
        "The answer: 42",
        False,
    )
    for usage in (chunks[-1]["usage"], answer["usage"]):
        assert usage["completion_tokens"] == 14 // 4 + 13 // 4  # the text's and the reasoning's
        assert usage["completion_tokens_details"] == {"reasoning_tokens": 13 // 4}


def reply(server: ScriptedModelServer, stream: bool, **body: Any) -> tuple[str, str, str, int]:
    """An answer as a client sees it: text, tool call names, finish reason, completion tokens."""
    if stream:
        chunks = raw_chunks(server, stream_options={"include_usage": True}, **body)
        calls = [d["function"]["name"] for d in raw_call_deltas(chunks) if "name" in d["function"]]
        finish = chunks[-2]["choices"][0]["finish_reason"]
        return raw_text(chunks), ",".join(calls), finish, chunks[-1]["usage"]["completion_tokens"]
    answer = raw_answer(server, **body)
    choice = answer["choices"][0]
    calls = [c["function"]["name"] for c in choice["message"].get("tool_calls", [])]
    text = choice["message"]["content"] or ""
    return text, ",".join(calls), choice["finish_reason"], answer["usage"]["completion_tokens"]


@pytest.mark.parametrize("cap", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [True, False])
def test_the_output_cap_cuts_the_text_and_says_length(cap: str, stream: bool) -> None:
    steps = [
        Step(text="x" * 50, tool_calls=[ScriptedToolCall("f")]),
        Step(text="y" * 20, tool_calls=[ScriptedToolCall("f")]),  # exactly 4 * 5 characters
    ]
    with ScriptedModelServer(steps) as server:
        cut = reply(server, stream, **{cap: 5})
        whole = reply(server, stream, **{cap: 5})
    assert cut == ("x" * 20, "", "length", 5)
    assert whole == ("y" * 20, "f", "tool_calls", 20 // 4 + 10)


def test_every_quirk_at_once_still_answers_a_plain_request() -> None:
    step = Step(text="hi", reasoning="hmm", tool_calls=[ScriptedToolCall("f", '{"a": 1}')])
    with ScriptedModelServer([step], quirks=QUIRKS) as server:
        chunks = raw_chunks(server)
    deltas = deltas_of(chunks)
    assert [d["reasoning"] for d in deltas if "reasoning" in d] == ["hmm"]
    assert raw_text(chunks) == "hi"
    groups = [d["tool_calls"] for d in deltas if d.get("tool_calls")]
    assert groups == [[{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]]
    assert all("usage" not in c for c in chunks)


def test_a_whole_stream_keeps_the_connection_and_a_cut_one_closes_it(
    server: ScriptedModelServer,
) -> None:
    server.push(Step(text="one"), Step(text="two"), Step(text="cut", disconnect_after=1))
    host, port = server.base_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port))
    body = json.dumps({"model": "m", "messages": [], "stream": True})
    answers = []
    for _ in range(3):
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = response_of(conn)
        answers.append((response.getheader("Connection"), conn.sock and conn.sock.getsockname()))
    # The first two answers came on one connection, kept, as real servers keep it; the cut
    # stream says it closes it.
    [(kept, first), (again, second), (cut, gone)] = answers
    assert (kept, again, cut, gone) == (None, None, "close", None)
    assert first == second


def response_of(conn: http.client.HTTPConnection) -> http.client.HTTPResponse:
    response = conn.getresponse()
    with contextlib.suppress(http.client.IncompleteRead):
        response.read()
    return response


def test_an_endless_step_streams_past_any_cap_until_the_client_hangs_up(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="on ", chunk_chars=3, endless=True), Step(text="next"))
    seen: list[ChatCompletionChunk] = []
    with client.chat.completions.create(
        model="m", messages=HELLO, stream=True, max_tokens=1
    ) as stream:
        for chunk in stream:
            seen.append(chunk)
            if len(seen) == 1000:
                break
    assert text_of(seen) == "on " * 999  # the first chunk holds the role
    assert all(c.choices[0].finish_reason is None for c in seen)
    server.wait_for_disconnects(1)
    assert text_of(stream_chat(client)) == "next"  # the server goes on with its script
