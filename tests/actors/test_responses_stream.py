"""Reading a Responses API stream as servers send it: events of OpenAI's shape, and the ways a
server bridging to another API may differ (a call whole at its end, text only in its item's
end, bytes that are not UTF-8), each read into the reply plait records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plait.actors._responses import ResponsesReader
from plait.actors._stream import Assembly, Cut, Failure, ModelReply
from plait.events import ReasoningItem, Usage


def read(*events: dict[str, Any] | bytes, max_tokens: int | None = None) -> ModelReply:
    assembly = Assembly(lambda _: None, max_tokens=max_tokens)
    reader = ResponsesReader(assembly)
    for event in events:
        reader.feed(event if isinstance(event, bytes) else json.dumps(event).encode())
    assert assembly.done
    return assembly.reply()


def completed(**usage: int) -> dict[str, Any]:
    response = {"id": "resp_1", "model": "m", "usage": usage or None}
    return {"type": "response.completed", "response": response}


CALL = {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": ""}


def test_text_calls_reasoning_and_usage_are_read_in_order() -> None:
    reply = read(
        {"type": "response.created", "response": {"id": "resp_1", "model": "m-2"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning"}},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "Think."},
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Think."}],
                "encrypted_content": "opaque",
            },
        },
        {"type": "response.output_text.delta", "output_index": 1, "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 1, "delta": "lo."},
        {"type": "response.output_item.added", "output_index": 2, "item": CALL},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"a"'},
        {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": ": 1}"},
        {"type": "response.output_item.done", "output_index": 2, "item": CALL},
        completed(
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            output_tokens_details={"reasoning_tokens": 2},  # type: ignore[arg-type]
        ),
    )
    assert (reply.text, reply.reasoning, reply.finish_reason) == ("Hello.", "Think.", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_a", "f", '{"a": 1}')]
    assert reply.reasoning_items == [ReasoningItem("rs_1", ["Think."], [], "opaque")]
    assert reply.usage == Usage(10, 5, 15, 0, 2)
    assert (reply.response_id, reply.response_model) == ("resp_1", "m-2")


def test_a_call_or_text_sent_whole_at_its_end_is_read() -> None:
    whole = {**CALL, "arguments": '{"a": 2}'}
    message = {"type": "message", "content": [{"type": "output_text", "text": "Whole."}]}
    reply = read(
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.output_item.added", "output_index": 1, "item": CALL},
        {"type": "response.output_item.done", "output_index": 1, "item": whole},
        {"type": "response.output_item.done", "output_index": 2, "item": {**whole, "call_id": "b"}},
        completed(),
    )
    assert reply.text == "Whole."
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("call_a", '{"a": 2}'),
        ("b", '{"a": 2}'),
    ]
    assert reply.usage is None  # the server sent none


def test_a_stream_without_output_indexes_is_read_by_its_items() -> None:
    # llama.cpp's llama-server sends no output_index: a call is one call, not one per event.
    call = {**CALL, "id": "fc_1"}
    reply = read(
        {"type": "response.output_item.added", "item": call},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{}"},
        {"type": "response.output_item.done", "item": {**call, "arguments": "{}"}},
        {"type": "response.output_item.added", "item": {**CALL, "call_id": "call_b"}},
        {"type": "response.function_call_arguments.delta", "delta": '{"b": 1}'},
        {"type": "response.output_item.done", "item": {**CALL, "call_id": "call_b"}},
        completed(),
    )
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "{}"),
        ("call_b", '{"b": 1}'),
    ]


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_an_incomplete_response_ends_as_a_cut_reply(reason: str, finish: str) -> None:
    incomplete = {
        "type": "response.incomplete",
        "response": {"incomplete_details": {"reason": reason}},
    }
    reply = read({"type": "response.output_text.delta", "delta": "Cut"}, incomplete)
    assert (reply.text, reply.finish_reason) == ("Cut", finish)


def test_undecodable_text_is_read_as_replacement_characters() -> None:
    delta = b'{"type": "response.output_text.delta", "delta": "a \xff b"}'
    reply = read(delta, completed())
    assert reply.text == "a \ufffd b"


@pytest.mark.parametrize(
    ("event", "said"),
    [
        (
            {"type": "response.failed", "response": {"error": {"message": "overloaded"}}},
            "the model server failed mid-stream: overloaded",
        ),
        (
            {"type": "error", "message": "bad input"},
            "the model server failed mid-stream: bad input",
        ),
    ],
)
def test_a_failure_reported_in_the_stream_is_a_failed_attempt(
    event: dict[str, Any], said: str
) -> None:
    with pytest.raises(Failure) as failed:
        read(event)
    assert (failed.value.kind, failed.value.message) == ("unavailable", said)


def test_a_malformed_event_is_a_malformed_stream() -> None:
    with pytest.raises(Failure) as failed:
        read(b"{not json")
    assert failed.value.kind == "malformed"


def test_a_reply_past_its_cap_is_cut_where_it_passes_it() -> None:
    deltas = [{"type": "response.output_text.delta", "delta": "w "} for _ in range(40)]
    with pytest.raises(Cut):
        read(*deltas, max_tokens=8)
