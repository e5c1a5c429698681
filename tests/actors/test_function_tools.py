"""Function tools: Python functions offered beside MCP tools, recorded and replayed as they are."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
from pathlib import Path
from typing import Any, Literal

import msgspec
import pydantic
import pytest
from scripted import assert_histories_valid, call, runtime_for

import plait
from plait import ConfigError
from plait.actors.mcp._functions import FunctionConnection
from plait.events import McpServerReady, ModelRequested, ToolCallCompleted, ToolCallRequested
from plait.replay import audit, replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

ran: collections.Counter[str] = collections.Counter()


class Order(msgspec.Struct):
    id: int
    status: str


@plait.tool(read_only=True)
def lookup_order(order_id: int) -> Order:
    """Look up an order by its id."""
    ran["lookup_order"] += 1
    return Order(order_id, "shipped")


@plait.tool
async def refund(order_id: int, reason: Literal["damaged", "late"]) -> str:
    """Refund an order."""
    ran["refund"] += 1
    if order_id < 0:
        raise ValueError(f"order {order_id} does not exist")
    return f"refunded order {order_id} ({reason})"


def tools_runtime(server: ScriptedModelServer, tmp_path: Path, **kwargs: Any) -> Runtime:
    ids = itertools.count(1)
    return runtime_for(server, tmp_path, new_id=lambda: f"id-{next(ids)}", **kwargs)


def tool_names(request: Any) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


def test_function_tools_are_called_audited_and_replayed_without_running(tmp_path: Path) -> None:
    ran.clear()
    script = [
        Step(tool_calls=[call("lookup_order", order_id=7), call("lookup_order", order_id="x")]),
        Step(tool_calls=[call("refund", order_id=7, reason="damaged")]),
        Step(tool_calls=[call("refund", order_id=-1, reason="late")]),
        Step(text="order 7 is refunded"),
    ]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(server, tmp_path, tools=[lookup_order, refund]) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("refund order 7", timeout=30)
        store = runtime.store
        events = store.read(session.session_id)
        assert outcome.last_assistant_message == "order 7 is refunded"
        # Offered after the built-ins, by name, with the schema their signatures give.
        offered = server.requests[0].body["tools"]
        assert tool_names(server.requests[0])[5:] == ["lookup_order", "refund"]
        assert offered[5]["function"]["description"] == "Look up an order by its id."
        assert offered[6]["function"]["parameters"]["properties"]["reason"] == {
            "enum": ["damaged", "late"]
        }
        # What the model was told of each call.
        answers = [m["content"] for m in server.requests[1].messages if m["role"] == "tool"]
        assert answers == [
            '{"id":7,"status":"shipped"}',
            "invalid arguments for lookup_order: key 'order_id': Expected `int`, got `str`",
        ]
        assert server.requests[3].messages[-1]["content"] == (
            "refund failed: order -1 does not exist"
        )
        rows = audit(store, session.session_id)
        assert [(r.tool, r.outcome, r.read_only) for r in rows] == [
            ("lookup_order", "ok", True),
            ("lookup_order", "error", True),
            ("refund", "ok", False),
            ("refund", "error", False),
        ]
        assert all(r.duration_ms is not None for r in rows)
        [ready] = [e.body for e in events if isinstance(e.body, McpServerReady)]
        assert [t.name for t in ready.tools] == ["lookup_order", "refund"]
        assert_histories_valid(events)
        # The bad argument never reached the function; the raising call did.
        assert ran == {"lookup_order": 1, "refund": 2}
        result = replay(store, session.session_id, timeout=10)
        given = replay(store, session.session_id, timeout=10, tools=[lookup_order, refund])
    assert result.divergence is None, result.divergence
    assert given.divergence is None, given.divergence
    assert ran == {"lookup_order": 1, "refund": 2}  # replay fed the recorded results


def test_a_replay_given_a_changed_function_diverges_at_the_first_request(
    tmp_path: Path,
) -> None:
    script = [Step(tool_calls=[call("lookup_order", order_id=7)]), Step(text="shipped")]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(server, tmp_path, tools=[lookup_order]) as runtime,
    ):
        session = runtime.start_session()
        session.run("where is order 7?", timeout=30)

        def changed(order_id: str) -> str:  # now takes a string
            return order_id

        recorded_events = runtime.store.read(session.session_id)
        result = replay(
            runtime.store,
            session.session_id,
            timeout=5,
            tools=[plait.tool(changed, name="lookup_order", read_only=True)],
        )
    divergence = result.divergence
    assert divergence is not None
    first_request = next(e.seq for e in recorded_events if isinstance(e.body, ModelRequested))
    assert divergence.seq == first_request
    assert "tools_sha256" in divergence.fields


def test_a_session_offers_its_own_tools_beside_the_runtimes(tmp_path: Path) -> None:
    def stock(sku: str, warehouse: str = "main") -> int:
        """How many items of a product a warehouse holds."""
        return len(sku) + len(warehouse)

    script = [Step(tool_calls=[call("stock", sku="abc")]), Step(text="7 left")]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(server, tmp_path, tools=[lookup_order]) as runtime,
    ):
        session = runtime.start_session(tools=[stock])
        session.run("how many abc?", timeout=30)
        events = runtime.store.read(session.session_id)
        other = runtime.start_session()
    assert tool_names(server.requests[0])[5:] == ["lookup_order", "stock"]
    [completed] = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert (completed.output, completed.outcome) == ("7", "ok")
    assert runtime.tools_for(other.session_id) == [lookup_order]


def test_an_allowlist_names_function_tools_as_it_names_mcp_tools(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("refund", order_id=1, reason="late")]), Step(text="no")]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(server, tmp_path, tools=[lookup_order, refund]) as runtime,
    ):
        session = runtime.start_session(mcp_allowlist=["lookup_order"])
        session.run("refund 1", timeout=30)
        events = runtime.store.read(session.session_id)
    assert tool_names(server.requests[0])[5:] == ["lookup_order"]
    [requested] = [e.body for e in events if isinstance(e.body, ToolCallRequested)]
    [completed] = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert (requested.tool, completed.outcome) == ("refund", "refused")
    assert "refund" in completed.output


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: plait.tool(lambda x: x, name="git__log"), "without '__'"),
        (lambda: plait.tool(lambda x: x, name="conv_send"), "built-in"),
        (lambda: plait.tool(lambda *rest: rest, name="spread"), "*rest"),
        (lambda: plait.tool(lambda x: x, name="slow", timeout_sec=0), "timeout_sec"),
    ],
)
def test_a_tool_that_cannot_be_offered_is_refused_with_its_reason(make: Any, problem: str) -> None:
    with pytest.raises(ConfigError, match="function tool") as raised:
        make()
    assert problem in str(raised.value)


def test_two_tools_of_one_name_are_refused(tmp_path: Path) -> None:
    other = plait.tool(lambda order_id: order_id, name="lookup_order")
    with pytest.raises(ConfigError, match="two function tools are named 'lookup_order'"):
        Runtime(tmp_path / "plait.db", RuntimeSettings(tools=[lookup_order, other]))


def test_approvals_ask_by_the_tools_hints_and_a_denied_function_never_runs(
    tmp_path: Path,
) -> None:
    ran.clear()
    asked: list[str] = []

    def approver(request: plait.ApprovalRequest) -> plait.ApprovalDecision:
        asked.append(request.tool)
        return plait.ApprovalDecision(approved=False, reason="refunds need a person")

    script = [
        Step(tool_calls=[call("lookup_order", order_id=7)]),
        Step(tool_calls=[call("refund", order_id=7, reason="late")]),
        Step(text="a person must refund it"),
    ]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(
            server,
            tmp_path,
            tools=[lookup_order, refund],
            approval_policy="on-write",
            approver=approver,
        ) as runtime,
    ):
        session = runtime.start_session()
        session.run("refund order 7", timeout=30)
        rows = audit(runtime.store, session.session_id)
    assert asked == ["refund"]  # the read-only lookup was not asked about
    assert [(r.tool, r.outcome) for r in rows] == [("lookup_order", "ok"), ("refund", "refused")]
    assert ran == {"lookup_order": 1}


def test_a_function_that_overruns_its_timeout_ends_timeout_and_counts_in_stats(
    tmp_path: Path,
) -> None:
    @plait.tool(timeout_sec=0.2)
    async def wait_for_payment(order_id: int) -> str:
        """Wait until an order is paid."""
        await asyncio.Event().wait()  # never
        return "paid"

    script = [Step(tool_calls=[call("wait_for_payment", order_id=7)]), Step(text="not yet")]
    with (
        ScriptedModelServer(script) as server,
        tools_runtime(server, tmp_path, tools=[wait_for_payment]) as runtime,
    ):
        session = runtime.start_session()
        session.run("is 7 paid?", timeout=30)
        events = runtime.store.read(session.session_id)
        [stats] = session.stats().values()
    [completed] = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert (completed.output, completed.outcome) == (
        "wait_for_payment timed out after 0.2s",
        "timeout",
    )
    assert (stats.tool_calls, stats.tool_failures, stats.mcp_calls) == (1, 1, 1)


@dataclasses.dataclass
class Parcel:
    weight_kg: float


class Address(pydantic.BaseModel):
    city: str


@pytest.mark.parametrize(
    ("returned", "output", "outcome"),
    [
        ("as it is", "as it is", "ok"),
        (None, "", "ok"),
        (Parcel(1.5), '{"weight_kg":1.5}', "ok"),
        (Address(city="Lyon"), '{"city":"Lyon"}', "ok"),
        ({"n": [1, 2]}, '{"n":[1,2]}', "ok"),
        (object(), "give failed: its result (object) is not JSON", "error"),
    ],
)
def test_what_a_function_returns_is_shown_as_text_or_json(
    returned: object, output: str, outcome: str
) -> None:
    give = plait.tool(lambda: returned, name="give")
    connection = FunctionConnection([give])
    result = asyncio.run(connection.call("give", "{}"))
    assert result.outcome == outcome
    if outcome == "ok":
        assert result.output == output
    else:  # then msgspec's own words
        assert result.output.startswith(output)
