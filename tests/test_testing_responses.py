"""``ScriptedModelServer`` on OpenAI's Responses API, through the real ``openai`` SDK: what it
streams and answers from the same script of ``Step``s as Chat Completions, what it keeps for
``previous_response_id``, and what it refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec
import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent

from plait._scripted_responses import ENCRYPTED_REASONING, encrypted_reasoning
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def client(server: ScriptedModelServer) -> Iterator[OpenAI]:
    client = OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    yield client
    client.close()


def stream_events(client: OpenAI, **kwargs: Any) -> list[ResponseStreamEvent]:
    kwargs.setdefault("input", "hello")
    with client.responses.create(model="m", stream=True, **kwargs) as stream:
        return list(stream)


def text_of(events: list[ResponseStreamEvent]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def final_of(events: list[ResponseStreamEvent]) -> Response:
    last = events[-1]
    assert last.type in {"response.completed", "response.incomplete", "response.failed"}
    return last.response


def as_input(response: Response) -> list[Any]:
    """A response's output items as the next request's input, as a client sends them back."""
    return [item.model_dump(exclude_none=True) for item in response.output]


@pytest.mark.parametrize(
    ("text", "chunk_chars"),
    [("Hello, world! How are you?", 8), ("é日本語🙂 mixed", 3), ("x", 1), ("", 8), ("a" * 100, 7)],
)
def test_streamed_text_reassembles_exactly(
    server: ScriptedModelServer, client: OpenAI, text: str, chunk_chars: int
) -> None:
    server.push(Step(text=text, chunk_chars=chunk_chars))
    events = stream_events(client)
    assert text_of(events) == text
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == -(-len(text) // chunk_chars)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = final_of(events)
    assert (final.id, final.status, final.output_text, final.model) == (
        "resp_1",
        "completed",
        text,
        "scripted-model",
    )
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert done.text == text


def test_a_stream_has_openais_events_in_openais_order(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(
        Step(
            text="Hi there",
            reasoning="Think.",
            tool_calls=[ScriptedToolCall("f", '{"a": 1}')],
            chunk_chars=4,
        )
    )
    events = stream_events(client)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",  # the reasoning
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",  # the message
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",  # the function call
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [(e.response.status, e.response.output) for e in events[:2]] == [("in_progress", [])] * 2


def test_function_calls_stream_their_arguments_and_ids(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    arguments = json.dumps({"title": "Quarterly notes", "tags": ["a", "b"], "n": 12})
    server.push(
        Step(
            text="Let me do that.",
            tool_calls=[
                ScriptedToolCall("conv_create", arguments),
                ScriptedToolCall("conv_list", id="call_explicit"),
            ],
        ),
        Step(tool_calls=[ScriptedToolCall("conv_get", '{"id": 3}')]),
    )
    with client.responses.stream(model="m", input="hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert final.output_text == "Let me do that."
    calls = [(i.call_id, i.name, i.arguments) for i in final.output if i.type == "function_call"]
    assert calls == [
        ("call_1", "conv_create", arguments),
        ("call_explicit", "conv_list", "{}"),
    ]
    assert "".join(deltas) == arguments + "{}"  # in pieces
    assert len(deltas) > 2
    # Only calls: no message. Default ids count calls over the server's life, as on chat.
    second = final_of(stream_events(client))
    assert [(i.type, getattr(i, "call_id", None)) for i in second.output] == [
        ("function_call", "call_2")
    ]


@pytest.mark.parametrize("include", [True, False])
def test_reasoning_is_an_item_with_a_summary_and_encrypted_content_when_included(
    server: ScriptedModelServer, client: OpenAI, include: bool
) -> None:
    step = Step(text="The answer: 42", reasoning="think it over, twice", chunk_chars=5)
    server.push(step)
    extra: dict[str, Any] = {"include": [ENCRYPTED_REASONING]} if include else {}
    events = stream_events(client, **extra)
    summary = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert summary == ["think", " it o", "ver, ", "twice"]
    reasoning, message = final_of(events).output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert reasoning.id.startswith("rs_")
    assert [s.text for s in reasoning.summary] == ["think it over, twice"]
    expected = encrypted_reasoning(step) if include else None
    assert reasoning.encrypted_content == expected
    assert (expected or "x") != step.reasoning  # opaque


def test_the_next_request_carries_the_encrypted_reasoning_back(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    step = Step(reasoning="I need the list.", tool_calls=[ScriptedToolCall("conv_list")])
    server.push(step, Step(text="Two conversations."))
    first = client.responses.create(
        model="m", input="hello", store=False, include=[ENCRYPTED_REASONING]
    )
    output = {"type": "function_call_output", "call_id": "call_1", "output": "[1, 2]"}
    second = client.responses.create(
        model="m",
        input=[{"role": "user", "content": "hello"}, *as_input(first), output],
        store=False,
        include=[ENCRYPTED_REASONING],
    )
    assert second.output_text == "Two conversations."
    sent = server.requests[1].input
    assert [item.get("type") for item in sent] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent[1]["encrypted_content"] == encrypted_reasoning(step)


def test_usage_is_reported_in_the_responses_shape(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(
        Step(text="hi", prompt_tokens=120, completion_tokens=30),
        Step(text="12345678", reasoning="1234", prompt_tokens=5),  # 2 + 1 tokens by default
        Step(text="counted"),
        Step(text="none", send_usage=False),
    )
    figures = []
    for _ in range(2):
        usage = final_of(stream_events(client)).usage
        assert usage is not None
        figures.append(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.output_tokens_details.reasoning_tokens,
                usage.total_tokens,
            )
        )
    assert figures == [(120, 30, 0, 150), (5, 3, 1, 8)]
    counted = client.responses.create(model="m", input="x" * 400).usage
    assert counted is not None and counted.input_tokens > 100  # the body's bytes // 4
    assert client.responses.create(model="m", input="x").usage is None


@pytest.mark.parametrize("stream", [True, False])
def test_the_output_cap_makes_the_response_incomplete(
    server: ScriptedModelServer, client: OpenAI, stream: bool
) -> None:
    server.push(
        Step(text="x" * 50, tool_calls=[ScriptedToolCall("f")]),
        Step(text="y" * 20, tool_calls=[ScriptedToolCall("f")]),  # exactly 4 * 5 characters
    )

    def ask() -> Response:
        if stream:
            return final_of(stream_events(client, max_output_tokens=5))
        return client.responses.create(model="m", input="hello", max_output_tokens=5)

    cut, whole = ask(), ask()
    assert (cut.status, cut.output_text, cut.usage and cut.usage.output_tokens) == (
        "incomplete",
        "x" * 20,
        5,
    )
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert [i.type for i in cut.output] == ["message"]
    assert [(whole.status, whole.incomplete_details)] == [("completed", None)]
    assert [i.type for i in whole.output] == ["message", "function_call"]


def test_a_stream_cut_by_the_cap_ends_with_response_incomplete(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="x" * 50))
    events = stream_events(client, max_output_tokens=2)
    assert events[-1].type == "response.incomplete"
    assert text_of(events) == "x" * 8


def test_a_failing_step_ends_its_stream_with_response_failed(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="Half an ans", failure="The model crashed."), Step(failure="again"))
    events = stream_events(client)
    assert text_of(events) == "Half an ans"
    assert events[-1].type == "response.failed"
    failed = final_of(events)
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.message) == ("server_error", "The model crashed.")
    assert "response.output_text.done" not in [e.type for e in events]
    with pytest.raises(openai.InternalServerError, match="again"):
        client.responses.create(model="m", input="hello")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_http_error_steps_are_http_errors_on_this_wire_too(
    server: ScriptedModelServer,
    client: OpenAI,
    status: int,
    error: type[openai.APIStatusError],
    stream: bool,
) -> None:
    server.push(Step(status=status, error_message=f"scripted {status}"))
    with pytest.raises(error) as raised:
        client.responses.create(model="m", input="hello", stream=stream)
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"] == f"scripted {status}"


def test_a_whole_answer_is_the_streams_final_response(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    step = Step(text="Same.", reasoning="Hmm.", tool_calls=[ScriptedToolCall("f", id="c")])
    server.push(step, msgspec.structs.replace(step, prompt_tokens=9))
    streamed = final_of(stream_events(client, include=[ENCRYPTED_REASONING]))
    whole = client.responses.create(model="m", input="hello", include=[ENCRYPTED_REASONING])

    def without_ids(response: Response) -> dict[str, Any]:
        dumped = response.model_dump(exclude={"id", "usage"})
        dumped["output"] = [{**item, "id": None} for item in dumped["output"]]
        return dumped

    assert (streamed.id, whole.id) == ("resp_1", "resp_2")
    assert [i.id for i in whole.output] == ["rs_2", "msg_2", "fc_2_1"]
    assert without_ids(whole) == without_ids(streamed)
    assert whole.usage is not None and streamed.usage is not None
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (
        9,
        streamed.usage.output_tokens,
    )


def test_records_what_the_model_was_shown(server: ScriptedModelServer, client: OpenAI) -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "name": "conv_create",
            "description": "Create a conversation.",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
        }
    ]
    items: list[Any] = [{"role": "user", "content": "Make one."}]
    server.push(Step(text="a"), Step(text="b"))
    stream_events(client, input=items, tools=tools, instructions="Be brief.")
    client.responses.create(model="other", input="Just this.")
    first, second = server.wait_for_requests(2)
    assert (first.path, first.wire, first.model, first.stream) == (
        "/v1/responses",
        "responses",
        "m",
        True,
    )
    assert (first.input, first.instructions, first.tools, first.messages) == (
        items,
        "Be brief.",
        tools,
        [],
    )
    assert first.headers["authorization"] == "Bearer k"
    assert (second.wire, second.model, second.stream, second.instructions, second.tools) == (
        "responses",
        "other",
        False,
        None,
        None,
    )
    assert second.input == [{"type": "message", "role": "user", "content": "Just this."}]
    assert second.body["input"] == "Just this."


def test_one_script_drives_either_wire(server: ScriptedModelServer, client: OpenAI) -> None:
    server.push(
        Step(tool_calls=[ScriptedToolCall("f", '{"x": 1}')]),
        Step(tool_calls=[ScriptedToolCall("f", '{"x": 1}')]),
    )
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    response = client.responses.create(model="m", input="a")
    [chat_call] = chat.choices[0].message.tool_calls or []
    [call] = response.output
    assert call.type == "function_call"
    assert chat_call.type == "function"
    assert (chat_call.function.name, chat_call.function.arguments, chat_call.id) == (
        "f",
        '{"x": 1}',
        "call_1",
    )
    assert (call.name, call.arguments, call.call_id) == ("f", '{"x": 1}', "call_2")
    assert [r.wire for r in server.requests] == ["chat", "responses"]


def bad_request(client: OpenAI, **kwargs: Any) -> dict[str, Any]:
    """The error body of a request the server refuses with HTTP 400."""
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="m", **kwargs)
    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    return raised.value.body


def test_an_output_for_a_call_never_made_is_refused_and_takes_no_step(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="answered"))
    call = {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": "{}"}
    early = {"type": "function_call_output", "call_id": "call_a", "output": "1"}
    stray = {"type": "function_call_output", "call_id": "call_zz", "output": "1"}
    # An output must follow its call: before it, the call is not yet made.
    for items, call_id in (
        ([stray], "call_zz"),
        ([early, call], "call_a"),
        ([call, stray], "call_zz"),
    ):
        said = f"No tool call found for function call output with call_id {call_id}."
        assert bad_request(client, input=items) == {
            "message": said,
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        }
    assert client.responses.create(model="m", input=[call, early]).output_text == "answered"
    assert len(server.requests) == 4


def test_a_stored_response_can_be_followed_and_one_not_stored_cannot(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(
        Step(tool_calls=[ScriptedToolCall("f")]),
        Step(text="done"),
        Step(text="not kept"),
    )
    first = client.responses.create(model="m", input="hello")  # stored, as OpenAI's default
    output = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    # The call is in the response followed, not in this input.
    second = client.responses.create(model="m", input=[output], previous_response_id=first.id)
    assert (second.output_text, second.previous_response_id) == ("done", "resp_1")
    unkept = client.responses.create(model="m", input="x", store=False)
    error = bad_request(client, input="more", previous_response_id=unkept.id)
    assert error == {
        "message": "Previous response with id 'resp_3' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_a_new_server_knows_no_response_of_the_one_before() -> None:
    step = Step(reasoning="Plan.", tool_calls=[ScriptedToolCall("f")])
    with (
        ScriptedModelServer([step]) as server,
        OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        first = client.responses.create(model="m", input="hello", store=True)
    reasoning = {"type": "reasoning", "id": first.output[0].id, "summary": []}
    with (
        ScriptedModelServer([Step(text="fresh")]) as server,
        OpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client,
    ):
        lost = bad_request(client, input="go on", previous_response_id=first.id)
        assert lost["code"] == "previous_response_not_found"
        # Reasoning sent back by id alone: the new server does not keep the item.
        item = bad_request(client, input=[reasoning])
        assert item["message"].startswith("Item with id 'rs_1' not found.")
        assert client.responses.create(model="m", input="go on").output_text == "fresh"


def test_a_stored_reasoning_item_can_be_sent_back_by_id(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(reasoning="Plan.", tool_calls=[ScriptedToolCall("f")]), Step(text="ok"))
    first = client.responses.create(model="m", input="hello")
    reasoning = {"type": "reasoning", "id": first.output[0].id, "summary": []}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "1"}
    call = {"type": "item_reference", "id": first.output[1].id}
    answer = client.responses.create(model="m", input=[reasoning, call, output])
    assert answer.output_text == "ok"


@pytest.mark.parametrize("after", [0, 1, 3, 100])
def test_midstream_disconnect_makes_the_iteration_raise(
    server: ScriptedModelServer, client: OpenAI, after: int
) -> None:
    server.push(Step(text="abcdefghijklmnopqrstuvwxyz", chunk_chars=4, disconnect_after=after))
    received: list[ResponseStreamEvent] = []
    with (
        pytest.raises(openai.APIConnectionError),
        client.responses.create(model="m", input="hello", stream=True) as stream,
    ):
        for event in stream:
            received.append(event)
    # created, in progress, item and part added, 7 deltas, text, part and item done, completed
    assert len(received) == min(after, 15)


def test_a_malformed_event_raises(server: ScriptedModelServer, client: OpenAI) -> None:
    server.push(Step(text="hello there", malformed=True))
    received: list[ResponseStreamEvent] = []
    with (
        pytest.raises(json.JSONDecodeError),
        client.responses.create(model="m", input="hello", stream=True) as stream,
    ):
        for event in stream:
            received.append(event)
    assert [e.type for e in received] == ["response.created"]


def test_an_endless_step_streams_until_the_client_hangs_up(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="on ", chunk_chars=3, endless=True), Step(text="next"))
    seen: list[ResponseStreamEvent] = []
    with client.responses.create(
        model="m", input="hello", stream=True, max_output_tokens=1
    ) as stream:
        for event in stream:
            seen.append(event)
            if len(seen) == 1000:
                break
    assert text_of(seen) == "on " * 996  # after created, in progress, item and part added
    server.wait_for_disconnects(1)
    assert text_of(stream_events(client)) == "next"


def test_a_failing_step_sends_a_chat_error_chunk(
    server: ScriptedModelServer, client: OpenAI
) -> None:
    server.push(Step(text="partial", failure="overloaded"), Step(failure="down"))
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    received = []
    with (
        pytest.raises(openai.APIError, match="overloaded"),
        client.chat.completions.create(model="m", messages=messages, stream=True) as stream,
    ):
        for chunk in stream:
            received.append(chunk)
    assert "".join(c.choices[0].delta.content or "" for c in received) == "partial"
    with pytest.raises(openai.InternalServerError, match="down"):
        client.chat.completions.create(model="m", messages=messages)


def test_a_body_that_is_no_json_object_is_refused(server: ScriptedModelServer) -> None:
    import http.client

    host, port = server.base_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port))
    conn.request("POST", "/v1/responses", "[1]", {"Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 400
    assert json.loads(answer.read())["error"]["message"].endswith("not a JSON object")
    conn.close()
