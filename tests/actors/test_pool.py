"""The pool's catalog is a fold of its events: conflicts withheld and recorded once, views."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from plait.actors import EffectLoop, Journal
from plait.actors._messages import Allowlist, CheckAllowlist, ToolView, ViewFor
from plait.actors._pool import McpPool, _Reported
from plait.actors.mcp import openai_spec, tool_list_hash
from plait.events import McpServerReady, McpToolSnapshot, McpToolWithheld, MemoryStore


def tool(name: str, schema: str = "s1") -> McpToolSnapshot:
    return McpToolSnapshot(name, name.split("__")[-1], schema_sha256=schema, input_schema="{}")


@pytest.fixture
def pool() -> Iterator[tuple[Any, MemoryStore]]:
    store, effects = MemoryStore(), EffectLoop()
    ref = McpPool.start(Journal(store, "s"), effects, {}, [])
    yield ref, store
    ref.stop()
    effects.close()


def report(ref: Any, *bodies: Any) -> None:
    for body in bodies:
        ref.tell(_Reported(body))


def test_one_name_with_two_schemas_is_withheld_and_recorded_once(pool: Any) -> None:
    ref, store = pool
    report(
        ref,
        McpServerReady("a", [tool("a__b__lookup", "s1"), tool("a__echo")]),
        McpServerReady("a__b", [tool("a__b__lookup", "s2")]),
        McpServerReady("a__b", [tool("a__b__lookup", "s2")], attempt=2),  # a restart
    )
    view: ToolView = ref.ask(ViewFor(None), timeout=10)
    assert [t.name for t in view.tools] == ["a__echo"]
    assert view.sha256 == tool_list_hash([openai_spec(tool("a__echo"))])
    withheld = [e.body for e in store.read("s") if isinstance(e.body, McpToolWithheld)]
    assert withheld == [McpToolWithheld("a__b__lookup", ["a", "a__b"], ["s1", "s2"])]
    listed = {
        e.body.server: e.body.tools for e in store.read("s") if isinstance(e.body, McpServerReady)
    }
    assert listed == {  # each server's list, as the log keeps it
        "a": [tool("a__b__lookup", "s1"), tool("a__echo")],
        "a__b": [tool("a__b__lookup", "s2")],
    }


def test_the_same_name_with_the_same_schema_is_offered_once(pool: Any) -> None:
    ref, _ = pool
    report(ref, McpServerReady("a", [tool("a__b__x")]), McpServerReady("a__b", [tool("a__b__x")]))
    view: ToolView = ref.ask(ViewFor(("a__b__x", "a__nothing")), timeout=10)
    assert [t.name for t in view.tools] == ["a__b__x"]


def test_allowlists_are_checked_against_the_catalog(pool: Any) -> None:
    ref, _ = pool
    report(ref, McpServerReady("git", [tool("git__git_status")]))
    checked = ref.ask(CheckAllowlist(("git/git_status",)), timeout=10)
    assert checked == Allowlist(("git__git_status",), ("git/git_status",), ("git__git_status",))
    unknown = ref.ask(CheckAllowlist(("git__git_push",)), timeout=10)
    assert isinstance(unknown, str) and "git__git_push" in unknown and "no such" in unknown
    malformed = ref.ask(CheckAllowlist(("git/a/b",)), timeout=10)
    assert isinstance(malformed, str) and "malformed" in malformed
