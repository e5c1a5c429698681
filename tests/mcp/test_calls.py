"""Arguments are checked before a call; results are converted for the model (no server here)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.actors.mcp._calls import (
    CallResult,
    _flat,
    decode_arguments,
    from_mcp_result,
    schema_problem,
)

SCHEMA = msgspec.json.encode(
    {
        "type": "object",
        "properties": {
            "color": {"type": "string", "enum": ["red", "green"]},
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["color", "count"],
        "additionalProperties": False,
    }
).decode()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("{", "arguments for s__pick are not valid JSON"),
        ("[1]", "arguments for s__pick must be a JSON object, got an array"),
        ('"x"', "arguments for s__pick must be a JSON object, got a string"),
    ],
)
def test_arguments_that_are_not_a_json_object_are_refused(arguments: str, says: str) -> None:
    problem = decode_arguments("s__pick", arguments)
    assert isinstance(problem, str) and problem.startswith(says), problem


def test_empty_arguments_are_an_empty_object() -> None:
    assert decode_arguments("t", "") == {}
    assert decode_arguments("t", {"a": 1}) == {"a": 1}


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"color": "red"}, "invalid arguments for s__pick: 'count' is a required property"),
        ({"color": "blue", "count": 1}, "at arguments.color: 'blue' is not one of"),
        ({"color": "red", "count": "2"}, "at arguments.count: '2' is not of type 'integer'"),
        ({"color": "red", "count": 1, "tags": ["a", 2]}, "at arguments.tags[1]: 2 is not of"),
        ({"color": "red", "count": 1, "more": 1}, "Additional properties are not allowed"),
    ],
)
def test_schema_violations_say_what_to_fix(arguments: dict, says: str) -> None:
    problem = schema_problem("s__pick", SCHEMA, arguments)
    assert problem is not None and says in problem, problem


def test_valid_arguments_and_unusable_schemas_pass() -> None:
    assert schema_problem("s__pick", SCHEMA, {"color": "green", "count": 3, "tags": []}) is None
    assert schema_problem("t", "", {"anything": 1}) is None
    assert schema_problem("t", '{"type": 12}', {"anything": 1}) is None  # not JSON Schema


FLAT = msgspec.json.encode(
    {
        "title": "flatArguments",
        "type": "object",
        "properties": {
            "text": {"title": "Text", "type": "string"},
            "count": {"type": "integer", "default": 1},
            "ratio": {"type": "number"},
            "flag": {"type": ["boolean", "null"]},
            "items": {"type": "array"},
            "anything": {"description": "no type: any value"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
).decode()

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=4,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["text", "count", "ratio", "flag", "items", "anything", "other"]),
        JSON_VALUES,
    )
)
def test_the_fast_check_of_flat_schemas_agrees_with_jsonschema(arguments: dict) -> None:
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    schema = msgspec.json.decode(FLAT)
    assert _flat(FLAT) is not None  # checked without jsonschema when the arguments fit
    valid = validator_for(schema)(schema).is_valid(arguments)
    assert (schema_problem("t__flat", FLAT, arguments) is None) == valid


def text(value: str) -> NS:
    return NS(type="text", text=value)


def test_text_parts_are_joined_and_images_kept() -> None:
    image = NS(type="image", mime_type="image/png", data="iVBO")
    result = from_mcp_result([text("a"), image, text("b")], {"ignored": True}, False, 1.23456)
    assert result == CallResult("a\nb", "ok", [("image/png", "iVBO")], 1.235)


def test_structured_content_is_the_output_when_there_is_no_text() -> None:
    result = from_mcp_result([], {"result": 3, "unit": "s"}, False, 0)
    assert msgspec.json.decode(result.output) == {"result": 3, "unit": "s"}


def test_is_error_becomes_an_error_outcome() -> None:
    result = from_mcp_result([text("boom")], None, True, 2.0)
    assert (result.output, result.outcome, result.is_error) == ("boom", "error", True)


def test_other_parts_are_named_for_the_model() -> None:
    parts = [
        NS(type="resource", resource=NS(uri="file:///a", text="content of a")),
        NS(type="resource", resource=NS(uri="file:///b.bin", blob="AAAA")),
        NS(type="resource_link", uri="file:///c"),
        NS(type="audio", mime_type="audio/wav", data="UklG"),
    ]
    assert from_mcp_result(parts, None, False, 0).output.splitlines() == [
        "content of a",
        "[resource file:///b.bin omitted]",
        "[resource link: file:///c]",
        "[audio content omitted: audio/wav]",
    ]
