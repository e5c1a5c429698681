"""The built-in tools' wire names, schemas and argument checks (docs/conv-tools.md)."""

from __future__ import annotations

import msgspec
import pytest

from plait.actors._builtins import (
    BUILTIN_NAMES,
    ConvCreate,
    ConvHistory,
    ConvSend,
    builtin_specs,
    canonical_name,
    input_items,
    parse_arguments,
    plan_spec,
)
from plait.events import InputImage, InputText


def test_specs_come_in_the_fixed_order_with_valid_names() -> None:
    specs = builtin_specs()
    assert [s["function"]["name"] for s in [*specs, plan_spec()]] == list(BUILTIN_NAMES)
    assert BUILTIN_NAMES == (
        "conv_create",
        "conv_send",
        "conv_list",
        "conv_history",
        "conv_destroy",
        "update_plan",
    )
    for spec in specs:
        assert spec["type"] == "function" and spec["function"]["parameters"]["type"] == "object"
    assert "INTERRUPTS" in specs[0]["function"]["description"]
    assert "Does not interrupt" in specs[2]["function"]["description"]
    assert builtin_specs() == specs  # the same every time: prompts stay stable


def test_the_dotted_form_is_understood() -> None:
    assert canonical_name("conv.create") == "conv_create"
    assert canonical_name("conv_list") == "conv_list"
    assert canonical_name("git__status") is None


def test_arguments_parse_into_their_structs() -> None:
    parsed = parse_arguments(
        "conv.create", '{"user_instruction": "hi", "mcp_allowlist": ["time__now"]}'
    )
    assert parsed == ConvCreate(user_instruction="hi", mcp_allowlist=["time__now"])
    assert parse_arguments("conv_send", '{"conversation_id": "c", "text": "x"}') == ConvSend(
        "c", "x"
    )
    assert parse_arguments("conv_history", '{"conversation_id": "c", "limit": 2}') == ConvHistory(
        "c", 2
    )


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("conv_create", "{}", "give user_instruction or items"),
        (
            "conv_create",
            '{"user_instruction": "x", "base_instruction_text": "a", "base_instruction_file": "b"}',
            "not both",
        ),
        ("conv_send", '{"conversation_id": "c"}', "give text or items"),
        ("conv_send", '{"text": "x"}', "missing required field `conversation_id`"),
        ("conv_history", '{"conversation_id": "c", "limit": 0}', "limit must be positive"),
        (
            "conv_destroy",
            '{"conversation_id": 7}',
            "Expected `str`, got `int` - at `$.conversation_id`",
        ),
        ("conv_list", '{"bogus": 1}', "unknown field `bogus`"),
        ("conv_list", "{not json", "not valid JSON"),
        ("conv_fly", "{}", "conv_fly is not a built-in tool"),
    ],
)
def test_bad_arguments_become_messages_naming_the_problem(
    name: str, arguments: str, message: str
) -> None:
    result = parse_arguments(name, arguments)
    assert isinstance(result, str) and message in result


def test_input_items_and_continuation_payload() -> None:
    parsed = parse_arguments(
        "conv_send",
        msgspec.json.encode(
            {
                "conversation_id": "c",
                "text": "look",
                "items": [{"type": "image", "image_url": "data:,x"}],
            }
        ).decode(),
    )
    assert isinstance(parsed, ConvSend)
    assert input_items(parsed.text, parsed.items) == [InputText("look"), InputImage("data:,x")]
