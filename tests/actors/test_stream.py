"""Assembling a reply from the chunk shapes that servers other than OpenAI's send."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plait.actors._stream import Assembly, Failure, ModelReply, decode_chunk


def assemble(*deltas: dict[str, Any], finish: str = "tool_calls") -> ModelReply:
    assembly = Assembly(lambda _: None)
    for delta in deltas:
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        assembly.feed(decode_chunk(json.dumps(chunk)))
    assembly.feed(decode_chunk(json.dumps({"choices": [{"delta": {}, "finish_reason": finish}]})))
    return assembly.reply()


def calls(reply: ModelReply) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, str(c.arguments)) for c in reply.tool_calls]


def test_openai_shape_fragments_by_index() -> None:
    reply = assemble(
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]},
    )
    assert calls(reply) == [("a", "f", '{"x": 1}')]


def test_arguments_sent_as_an_object() -> None:
    reply = assemble(
        {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": {"x": 1}}}]}
    )
    assert calls(reply) == [("a", "f", '{"x":1}')]


def test_several_whole_calls_in_one_chunk() -> None:
    reply = assemble(
        {
            "tool_calls": [
                {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
                {"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y":2}'}},
            ]
        }
    )
    assert calls(reply) == [("a", "f", "{}"), ("b", "g", '{"y":2}')]


def test_calls_without_an_index_are_told_apart_by_id_or_name() -> None:
    by_id = assemble(
        {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"x"'}}]},
        {"tool_calls": [{"function": {"arguments": ": 1}"}}]},
        {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]},
    )
    assert calls(by_id) == [("a", "f", '{"x": 1}'), ("b", "g", "{}")]
    by_name = assemble(
        {"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
        {"tool_calls": [{"function": {"name": "g", "arguments": "{"}}]},
        {"tool_calls": [{"function": {"arguments": "}"}}]},
    )
    assert [(name, args) for _, name, args in calls(by_name)] == [("f", "{}"), ("g", "{}")]


def test_a_call_without_an_id_gets_one() -> None:
    reply = assemble({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]})
    ((call_id, name, _),) = calls(reply)
    assert call_id.startswith("call_") and len(call_id) > 10 and name == "f"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_is_kept_apart_from_the_text(field: str) -> None:
    heard: list[str] = []
    assembly = Assembly(lambda _: None, heard.append)
    for delta in ({field: "think "}, {field: "hard"}, {"content": "42"}):
        chunk = {"choices": [{"delta": delta, "finish_reason": None}]}
        assembly.feed(decode_chunk(json.dumps(chunk)))
    reply = assembly.reply()
    assert (reply.text, reply.reasoning, heard) == ("42", "think hard", ["think ", "hard"])


def test_an_error_inside_the_stream_is_a_failure() -> None:
    with pytest.raises(Failure, match="mid-stream: out of memory"):
        Assembly(lambda _: None).feed(decode_chunk('{"error": {"message": "out of memory"}}'))
