"""Tool names, snapshots, merged tool lists and allowlists are pure and deterministic."""

from __future__ import annotations

import re

import msgspec
import pytest

from plait import ToolError
from plait.actors._builtins import builtin_specs
from plait.actors.mcp import (
    Conflict,
    McpServerConfig,
    canonical_sha256,
    merge,
    normalize_allowlist,
    openai_spec,
    qualify,
    server_of,
    snapshot,
    tool_list_hash,
)
from plait.events import McpToolSnapshot

VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CONFIG = McpServerConfig(command="x")
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def tool(server: str, name: str, schema: dict | None = None, **keys) -> McpToolSnapshot:
    made = snapshot(
        server,
        name,
        description=keys.pop("description", f"{name} of {server}"),
        input_schema=SCHEMA if schema is None else schema,
        annotations=keys.pop("annotations", None),
        config=keys.pop("config", CONFIG),
    )
    assert made is not None
    return made


@pytest.mark.parametrize(
    ("server", "name", "expected"),
    [
        ("git", "git_status", "git__git_status"),
        ("a-b", "c_d", "a-b__c_d"),
        ("s", "x" * 61, "s__" + "x" * 61),  # exactly 64: kept
    ],
)
def test_short_valid_names_are_kept(server: str, name: str, expected: str) -> None:
    assert qualify(server, name) == expected


@pytest.mark.parametrize(
    ("server", "name"),
    [
        ("s", "x" * 62),  # 65 characters
        ("server", "y" * 200),
        ("fs", "read.file"),
        ("fs", "read/file"),
        ("fs", "lire-le-fichier-é"),
        ("fs", "with space"),
    ],
)
def test_other_names_are_shortened_or_sanitized_deterministically(server: str, name: str) -> None:
    fq = qualify(server, name)
    assert VALID.match(fq), fq
    assert fq == qualify(server, name)
    assert re.search(r"_[0-9a-f]{8}$", fq)
    assert fq.startswith(f"{server}__")


def test_shortened_names_stay_distinct() -> None:
    long = "t" * 80
    names = {qualify("s", long + str(i)) for i in range(200)}
    names |= {qualify("s", "a.b"), qualify("s", "a/b"), qualify("s", "a_b")}
    assert len(names) == 203


def test_the_hash_suffix_is_a_known_value() -> None:
    # Pinned (sha-256 of "fs__read.file"): a change renames tools in every recorded session.
    assert qualify("fs", "read.file") == "fs__read_file_3d6b9878"


def test_schema_hash_ignores_key_order_and_spaces() -> None:
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}}
    b = msgspec.json.decode(
        b'{"properties": {"y": {"type": "string"}, "x": {"type": "integer"}}, "type": "object"}'
    )
    assert canonical_sha256(a) == canonical_sha256(b)
    assert canonical_sha256(a) != canonical_sha256({**a, "required": ["x"]})


def test_snapshot_takes_read_only_from_the_hint_or_the_config() -> None:
    hinted = tool("s", "look", annotations={"readOnlyHint": True, "title": "Look", "x": [1]})
    assert hinted.read_only
    assert hinted.annotations == {"title": "Look"}  # the hint has its own field; lists dropped
    assert not tool("s", "write", annotations={"readOnlyHint": False}).read_only
    assert not tool("s", "unsure").read_only
    config = McpServerConfig(command="x", read_only_tools=["unsure"])
    assert tool("s", "unsure", config=config).read_only


def test_snapshot_keeps_the_schema_it_hashes() -> None:
    made = tool("s", "look")
    assert msgspec.json.decode(made.input_schema) == SCHEMA
    assert made.schema_sha256 == canonical_sha256(SCHEMA)
    assert (made.name, made.tool) == ("s__look", "look")


def test_snapshot_honours_enabled_and_disabled_tools() -> None:
    config = McpServerConfig(command="x", enabled_tools=["a", "b"], disabled_tools=["b"])
    offered = [
        name
        for name in ("a", "b", "c")
        if snapshot("s", name, description="", input_schema={}, annotations=None, config=config)
    ]
    assert offered == ["a"]


def test_merge_sorts_by_name_and_keeps_one_copy_of_identical_tools() -> None:
    listed = {
        "zeta": [tool("zeta", "b"), tool("zeta", "a")],
        "alpha": [tool("alpha", "z")],
        # "a" + "b__c" and "a__b" + "c" both make "a__b__c": same schema, one copy.
        "a": [tool("a", "b__c")],
        "a__b": [tool("a__b", "c")],
    }
    tools, conflicts = merge(listed)
    assert [t.name for t in tools] == ["a__b__c", "alpha__z", "zeta__a", "zeta__b"]
    assert tools[0].tool == "b__c"  # from the first server by name
    assert conflicts == []


def test_merge_withholds_a_name_offered_with_different_schemas() -> None:
    other = {"type": "object", "properties": {"q": {"type": "integer"}}}
    tools, conflicts = merge(
        {"a": [tool("a", "b__c"), tool("a", "ok")], "a__b": [tool("a__b", "c", other)]}
    )
    assert [t.name for t in tools] == ["a__ok"]
    assert conflicts == [
        Conflict("a__b__c", ["a", "a__b"], [canonical_sha256(SCHEMA), canonical_sha256(other)])
    ]
    assert "'a' and 'a__b'" in conflicts[0].message()


def test_merge_is_the_same_whatever_the_input_order() -> None:
    listed = {f"s{i}": [tool(f"s{i}", f"t{j}") for j in range(5)] for i in range(5)}
    shuffled = {k: list(reversed(v)) for k, v in reversed(list(listed.items()))}
    assert merge(listed) == merge(shuffled)


PINNED_MCP_LIST_HASH = "a49a41749cc8ffccb67ff1ad69ce1facdc8f912e1759d81974f3a1bd85564700"


def test_tool_list_and_hash_are_identical_across_runs() -> None:
    def offered() -> list[dict]:
        tools, _ = merge({"git": [tool("git", "status"), tool("git", "log")]})
        return builtin_specs() + [openai_spec(t) for t in tools]

    first, second = offered(), offered()
    assert first == second
    assert tool_list_hash(first) == tool_list_hash(second)
    names = [spec["function"]["name"] for spec in first]
    assert names[-2:] == ["git__log", "git__status"]
    assert tool_list_hash(first) != tool_list_hash(list(reversed(first)))
    # Snapshot: a change here changes the tools hash recorded in every ModelRequested.
    assert tool_list_hash(first[-2:]) == PINNED_MCP_LIST_HASH


def test_openai_spec_is_a_chat_completions_function() -> None:
    made = tool("s", "look", description="Look.")
    assert openai_spec(made) == {
        "type": "function",
        "function": {"name": "s__look", "description": "Look.", "parameters": SCHEMA},
    }
    bare = snapshot("s", "t", description=None, input_schema={}, annotations=None, config=CONFIG)
    assert bare is not None
    assert openai_spec(bare)["function"] == {
        "name": "s__t",
        "parameters": {"type": "object", "properties": {}},
    }


KNOWN = ["git__git_log", "git__git_status", "time__get_current_time"]


def test_allowlist_of_qualified_names_passes_sorted_and_deduplicated() -> None:
    names, warnings = normalize_allowlist(
        ["git__git_status", "git__git_log", "git__git_log"], KNOWN
    )
    assert names == ["git__git_log", "git__git_status"]
    assert warnings == []


def test_allowlist_server_slash_tool_is_normalized_with_a_warning() -> None:
    names, warnings = normalize_allowlist(["git/git_status", "time__get_current_time"], KNOWN)
    assert names == ["git__git_status", "time__get_current_time"]
    assert len(warnings) == 1
    assert "'git/git_status'" in warnings[0] and "deprecated" in warnings[0]
    assert "'git__git_status'" in warnings[0]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("git__nope", "no such MCP tool"),
        ("nope/git_status", "no such MCP tool"),
        ("git/", "malformed"),
        ("/git_status", "malformed"),
        ("git/a/b", "malformed"),
        ("git.git_status", "malformed"),
        ("", "malformed"),
        ("x" * 65, "malformed"),
    ],
)
def test_allowlist_unknown_or_malformed_entries_are_errors(entry: str, says: str) -> None:
    with pytest.raises(ToolError, match=says) as caught:
        normalize_allowlist(["git__git_log", entry], KNOWN)
    assert repr(entry) in str(caught.value)


def test_server_of_prefers_the_longest_server_name() -> None:
    servers = ["a", "a__b", "git"]
    assert server_of("a__b__c", servers) == "a__b"
    assert server_of("a__x", servers) == "a"
    assert server_of("git__git_log", servers) == "git"
    assert server_of("conv_create", servers) is None
