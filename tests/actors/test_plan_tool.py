"""The plan tool, ``update_plan`` (docs/tools.md#plan): offered by a conversation's switch,
each update an event, the current plan a projection, and a replay that makes it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import call, replayed, runtime_for

from plait.actors._builtins import PLAN_TOOL, UpdatePlan, parse_arguments
from plait.events import (
    ConversationOpened,
    Event,
    PlanStep,
    PlanUpdated,
    Redacted,
    StoragePolicy,
    ToolCallCompleted,
    ToolPrefs,
)
from plait.events.projections import PlansProjection
from plait.testing import ScriptedModelServer, Step

FIRST = [
    {"step": "read the issue", "status": "in_progress"},
    {"step": "write the fix", "status": "pending"},
]
LAST = [
    {"step": "read the issue", "status": "completed"},
    {"step": "write the fix", "status": "in_progress"},
]
TWO_RUNNING = [
    {"step": "read the issue", "status": "in_progress"},
    {"step": "write the fix", "status": "in_progress"},
]


def tool_names(server: ScriptedModelServer) -> list[list[str]]:
    """The tool names each request offered, in order."""
    return [
        [tool["function"]["name"] for tool in request.body.get("tools", ())]
        for request in server.requests
    ]


def completed(events: list[Event]) -> list[ToolCallCompleted]:
    return [e.body for e in events if isinstance(e.body, ToolCallCompleted)]


def test_two_updates_with_a_bad_one_between_are_recorded_and_the_last_is_current(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call(PLAN_TOOL, explanation="start", plan=FIRST)]),
        Step(tool_calls=[call(PLAN_TOOL, plan=TWO_RUNNING)]),
        Step(tool_calls=[call(PLAN_TOOL, plan=[{"step": "x", "status": "done"}])]),
        Step(tool_calls=[call(PLAN_TOOL, plan=LAST)]),
        Step(text="fixed"),
    )
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session(tool_prefs=ToolPrefs(include_plan_tool=True))
        assert session.run("fix it", timeout=30).ok
        root = session.root_conversation_id
        events = runtime.store.read(session.session_id)

    # Offered after the conv_* built-ins, every turn.
    assert tool_names(server)[0] == [
        *["conv_create", "conv_send", "conv_list", "conv_history", "conv_destroy"],
        PLAN_TOOL,
    ]
    updates = [e for e in events if isinstance(e.body, PlanUpdated)]
    assert [u.body for u in updates] == [
        PlanUpdated(
            "start",
            [PlanStep("read the issue", "in_progress"), PlanStep("write the fix")],
            updates[0].body.call_id,
        ),
        PlanUpdated(
            "",
            [PlanStep("read the issue", "completed"), PlanStep("write the fix", "in_progress")],
            updates[1].body.call_id,
        ),
    ]
    assert all(u.conversation_id == root for u in updates)
    answers = completed(events)
    assert [a.outcome for a in answers] == ["ok", "error", "error", "ok"]
    assert answers[0].output == "Plan updated"
    assert "at most one step may be in_progress" in str(answers[1].output)
    assert "`$.plan[0]`, `$.plan[1]`" in str(answers[1].output)
    assert "$.plan[0].status" in str(answers[2].output)  # the field named
    # The update is recorded between its call and its answer.
    order = [type(e.body).__name__ for e in events]
    first = order.index("PlanUpdated")
    assert order[first - 1] == "ToolCallRequested" and order[first + 1] == "ToolCallCompleted"

    plans = PlansProjection().fold(events)
    current = plans.by_conversation[root]
    assert current.plan == updates[-1].body and current.seq == updates[-1].seq
    assert current.updates == 2

    # Replay makes each update again from the model's recorded calls.
    replayed(tmp_path, session.session_id)


def test_a_conversation_without_the_switch_is_not_offered_it_and_its_call_is_refused(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(tool_calls=[call(PLAN_TOOL, plan=FIRST)]), Step(text="done"))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("go", timeout=30).ok
        events = runtime.store.read(session.session_id)
    assert all(PLAN_TOOL not in names for names in tool_names(server))
    [answer] = completed(events)
    assert answer.outcome == "refused"
    assert answer.output == "unknown tool 'update_plan': it is not offered here"
    assert not any(isinstance(e.body, PlanUpdated) for e in events)
    replayed(tmp_path, session.session_id)


def test_a_helper_inherits_the_switch_and_keeps_its_own_plan(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="plan it")]),
        Step(tool_calls=[call(PLAN_TOOL, plan=LAST)]),
        Step(text="helper done"),
        Step(text="root done"),
    )
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session(tool_prefs=ToolPrefs(include_plan_tool=True))
        assert session.run("go", timeout=30).ok
        events = runtime.store.read(session.session_id)
    [helper] = [
        e.conversation_id
        for e in events
        if isinstance(e.body, ConversationOpened) and e.body.parent_id is not None
    ]
    assert PLAN_TOOL in tool_names(server)[1]  # the helper's first request
    plans = PlansProjection().fold(events)
    assert list(plans.by_conversation) == [helper]
    replayed(tmp_path, session.session_id)


@pytest.mark.parametrize("kind", ["headers_only", "none"])
def test_the_plan_is_content_its_storage_policy_withholds(
    server: ScriptedModelServer, tmp_path: Path, kind: str
) -> None:
    server.push(Step(tool_calls=[call(PLAN_TOOL, explanation="why", plan=FIRST)]), Step(text="ok"))
    with runtime_for(server, tmp_path) as runtime:
        prefs = ToolPrefs(include_plan_tool=True)
        session = runtime.start_session(tool_prefs=prefs, storage_policy=StoragePolicy(kind))
        assert session.run("go", timeout=30).ok
        events = runtime.store.read(session.session_id)
    stored = [e.body for e in events if isinstance(e.body, PlanUpdated)]
    if kind == "none":
        assert stored == []
        return
    [plan] = stored
    assert isinstance(plan.explanation, Redacted)
    assert [type(step.step) for step in plan.steps] == [Redacted, Redacted]
    assert [step.status for step in plan.steps] == ["in_progress", "pending"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{}", "Object missing required field `plan`"),
        ('{"plan": [{"step": "a"}]}', "missing required field `status` - at `$.plan[0]`"),
        ('{"plan": [], "why": "x"}', "unknown field `why`"),
        ('{"plan": [{"step": " ", "status": "pending"}]}', "`$.plan[0].step` is empty"),
        ('{"plan": [{"step": "a", "status": "pending"}]', "are not valid JSON"),
    ],
)
def test_bad_arguments_are_an_error_that_names_the_field(arguments: str, message: str) -> None:
    parsed = parse_arguments(PLAN_TOOL, arguments)
    assert isinstance(parsed, str) and f"arguments for {PLAN_TOOL}" in parsed
    assert message in parsed


def test_an_empty_plan_clears_it() -> None:
    parsed = parse_arguments(PLAN_TOOL, '{"plan": []}')
    assert isinstance(parsed, UpdatePlan)
    assert parsed.updated("c1") == PlanUpdated("", [], "c1")


_updates = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", None]),
        st.lists(st.sampled_from(["pending", "in_progress", "completed"]), max_size=3),
    ),
    max_size=12,
)


@settings(max_examples=50, deadline=None)
@given(updates=_updates, cut=st.integers(0, 12))
def test_folding_plans_in_pieces_equals_one_fold(updates: list[Any], cut: int) -> None:
    from datetime import UTC, datetime

    events = [
        Event(
            "s",
            seq,
            datetime(2025, 1, 1, tzinfo=UTC),
            1,
            PlanUpdated("", [PlanStep(f"step {i}", status) for i, status in enumerate(statuses)]),
            b"",
            conversation_id=conv,
        )
        for seq, (conv, statuses) in enumerate(updates, start=1)
    ]
    projection = PlansProjection()
    whole = projection.fold(events)
    saved = projection.save(projection.fold(events[:cut]))
    assert projection.fold(events[cut:], projection.load(saved)) == whole
