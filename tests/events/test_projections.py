"""Projections: exact histories (docs/conversations.md), the index, tokens, audit, timeline; and
folding in pieces from saved states gives what one full fold gives."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded import FINAL_ANSWER, HELPER_ANSWER, HELPER_TASK, QUESTION, demo_events
from strategies import START, new_events, session_items

from plait.events import (
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    EventStore,
    HistoryCompacted,
    InputImage,
    InputText,
    MemoryStore,
    ModelRequested,
    ModelResponded,
    Redacted,
    SessionStarted,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TokensCounted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCall,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    Usage,
)
from plait.events.projections import (
    ActivityProjection,
    ApprovalsProjection,
    AuditProjection,
    ContextsProjection,
    HistoryProjection,
    Projection,
    TaskQueueProjection,
    TimelineProjection,
    TokensProjection,
    conversation_index,
)


def record(
    items: list[tuple[Any, str | None, str | None]], store: EventStore | None = None
) -> list[Event]:
    store = store or MemoryStore()
    return store.append("s", new_events(items, START), 0)


def wire(events: list[Event], conversation: str) -> list[dict[str, Any]]:
    state = HistoryProjection().fold(events)
    assert state.anomalies == []
    return [m.to_openai() for m in state.conversations[conversation].messages]


def assert_api_valid(messages: list[dict[str, Any]]) -> None:
    """Every assistant tool call is answered by exactly one tool message before anything else."""
    open_calls: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, message
            open_calls.remove(message["tool_call_id"])
        else:
            assert open_calls == [], f"{open_calls} unanswered before {message}"
            if message["role"] == "assistant":
                open_calls = [c["id"] for c in message.get("tool_calls", [])]


def opening(*extra: tuple[Any, str | None, str | None]) -> list[tuple[Any, str | None, str | None]]:
    return [(SessionStarted("root"), None, None), (ConversationOpened(), "root", None), *extra]


def task(conv: str, tid: str, *inputs: Any) -> list[tuple[Any, str | None, str | None]]:
    return [
        (TaskEnqueued(TaskPlan(tid, conv, list(inputs))), conv, tid),
        (TaskStarted(), conv, tid),
    ]


def test_demo_session_histories_are_stored_as_documented() -> None:
    ids = iter(f"id{i:02d}" for i in range(100))
    session, items = demo_events(START, lambda: next(ids))
    events = MemoryStore().append(session, items, 0)
    root, helper = "id01", "id02"
    create = {
        "id": "call_id06",
        "type": "function",
        "function": {"name": "conv_create", "arguments": events[6].body.tool_calls[0].arguments},  # type: ignore[union-attr]
    }
    assert wire(events, root) == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "I'll ask a helper conversation.", "tool_calls": [create]},
        {
            "role": "tool",
            "content": json.dumps(
                {"conversation_id": helper, "last_assistant_message": HELPER_ANSWER}
            ),
            "tool_call_id": "call_id06",
        },
        {"role": "assistant", "content": FINAL_ANSWER},
    ]
    helper_messages = wire(events, helper)
    assert helper_messages[0] == {"role": "user", "content": HELPER_TASK}
    assert helper_messages[1]["content"] is None and len(helper_messages[1]["tool_calls"]) == 1
    assert [m["role"] for m in helper_messages] == ["user", "assistant", "tool", "assistant"]


def test_index_counts_messages_and_tracks_last_activity() -> None:
    ids = iter(f"id{i:02d}" for i in range(100))
    session, items = demo_events(START, lambda: next(ids))
    events = MemoryStore().append(session, items, 0)
    index = conversation_index(HistoryProjection().fold(events))
    assert [(i.id, i.parent_id, i.message_count) for i in index] == [
        ("id01", None, 4),
        ("id02", "id01", 4),
    ]
    last_root = max(
        e.at for e in events if e.conversation_id == "id01" and isinstance(e.body, TaskCompleted)
    )
    assert index[0].last_active_at == last_root.isoformat().replace("+00:00", "Z")
    assert index[1].created_at.endswith("Z")


def test_abort_answers_open_calls_with_a_synthetic_output() -> None:
    calls = [ToolCall("a", "srv__x", "{}"), ToolCall("b", "srv__y", "{}")]
    items = opening(
        *task("root", "t1", InputText("go")),
        (ModelResponded("", calls), "root", "t1"),
        (ToolCallCompleted("a", "done"), "root", "t1"),
        (TurnAborted("interrupted", "user", "user pressed ctrl-c"), "root", "t1"),
    )
    messages = wire(record(items), "root")
    assert messages[-2:] == [
        {"role": "tool", "content": "done", "tool_call_id": "a"},
        {"role": "tool", "content": "aborted: interrupted", "tool_call_id": "b"},
    ]
    assert_api_valid(messages)


def test_replaced_turn_leaves_the_interrupting_call_to_its_continuation() -> None:
    calls = [ToolCall("x", "conv_send", "{}"), ToolCall("y", "srv__z", "{}")]
    items = opening(
        *task("root", "t1", InputText("go")),
        (ModelResponded("", calls), "root", "t1"),
        (TurnAborted("replaced", "replaced", awaiting_call_ids=["x"]), "root", "t1"),
    )
    events = record(items)
    state = HistoryProjection().fold(events)
    assert state.conversations["root"].open_calls == ["x"]
    assert state.conversations["root"].messages[-1].content == "aborted: replaced"
    later = record([*items, *task("root", "t2"), (ToolCallCompleted("x", "payload"), "root", "t2")])
    messages = wire(later, "root")
    assert messages[-1] == {"role": "tool", "content": "payload", "tool_call_id": "x"}
    assert_api_valid(messages)


def test_a_model_request_with_open_calls_is_flagged() -> None:
    items = opening(
        *task("root", "t1"),
        (ModelResponded("", [ToolCall("a", "srv__x", "{}")]), "root", "t1"),
        (ModelRequested("m", "t", "i"), "root", "t1"),
    )
    anomalies = HistoryProjection().fold(record(items)).anomalies
    assert len(anomalies) == 1 and "['a'] unanswered" in anomalies[0] and "seq 6" in anomalies[0]


def test_images_and_text_form_one_user_message_of_parts() -> None:
    items = opening(*task("root", "t1", InputText("look"), InputImage("data:image/png;base64,AA")))
    assert wire(record(items), "root") == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AA", "detail": "auto"},
                },
            ],
        }
    ]


def test_compaction_keeps_recent_messages_after_the_summary() -> None:
    items = opening(*task("root", "t1", InputText("one")), (ModelResponded("two"), "root", "t1"))
    items += task("root", "t2", InputText("three"))
    items += [
        (ModelResponded("four"), "root", "t2"),
        (HistoryCompacted("summary of one, two", 2), "root", None),
    ]
    assert [m["content"] for m in wire(record(items), "root")] == [
        "summary of one, two",
        "three",
        "four",
    ]


def test_context_change_with_clear_history_starts_afresh() -> None:
    items = opening(*task("root", "t1", InputText("old")))
    change = ConversationContextChanged(
        ["user_instructions"], user_instructions="be terse", clear_history=True
    )
    items.append((change, "root", None))
    assert [m["content"] for m in wire(record(items), "root")] == [
        "[context rebuilt: history cleared]",
        "be terse",
    ]


def test_destroyed_conversations_leave_the_index_but_keep_history() -> None:
    items = opening(
        (ConversationOpened(parent_id="root"), "c1", None),
        (ConversationDestroyed("done"), "c1", None),
    )
    state = HistoryProjection().fold(record(items))
    assert [i.id for i in conversation_index(state)] == ["root"]
    assert state.conversations["c1"].destroyed_at is not None


def test_redacted_content_reads_as_a_marker() -> None:
    store = MemoryStore(blob_threshold=10)
    items = opening(*task("root", "t1", InputText("a fairly long secret input")))
    events = record(items, store)
    ref = store.read("s", resolve_blobs=False)[2].body.plan.input_items[0].text  # type: ignore[union-attr]
    store.blobs.redact(ref.sha256)
    body = store.read("s")[2].body
    assert isinstance(body, TaskEnqueued)
    assert isinstance(body.plan.input_items[0], InputText)
    assert isinstance(body.plan.input_items[0].text, Redacted)
    assert wire(store.read("s"), "root") == [{"role": "user", "content": "[redacted: 26 bytes]"}]
    assert wire(events, "root") == [{"role": "user", "content": "a fairly long secret input"}]


def test_tokens_sum_per_conversation_and_session() -> None:
    items = opening(
        (ConversationOpened(parent_id="root"), "c1", None),
        (TokensCounted(Usage(100, 10, 110)), "root", "t"),
        (TokensCounted(Usage(50, 5, 55, cached_tokens=20)), "c1", "t2"),
        (TokensCounted(Usage(200, 20, 220)), "root", "t"),
    )
    totals = TokensProjection().fold(record(items))
    assert totals.by_conversation["root"] == Usage(300, 30, 330)
    assert totals.by_conversation["c1"] == Usage(50, 5, 55, cached_tokens=20)
    assert totals.by_session["s"] == Usage(350, 35, 385, cached_tokens=20)
    assert totals.last_prompt_tokens == {"root": 200, "c1": 50}


def test_audit_follows_each_call_from_request_to_outcome() -> None:
    items = opening(
        *task("root", "t1"),
        (ToolCallRequested("a", "git__status", '{"repo": "."}', read_only=True), "root", "t1"),
        (ToolCallCompleted("a", "clean", duration_ms=4.5), "root", "t1"),
        (ToolCallRequested("b", "git__reset", "{}"), "root", "t1"),
        (ToolApprovalRequested("b", "git__reset", "destructive"), "root", "t1"),
        (ToolApprovalDecided("b", False, "user"), "root", "t1"),
        (ToolCallCompleted("b", "denied by user", outcome="refused"), "root", "t1"),
        (ToolCallRequested("c", "git__log"), "root", "t1"),
    )
    rows = AuditProjection().fold(record(items)).rows
    summary = [
        (r.call_id, r.tool, r.approval, r.decided_by, r.outcome, r.output_size) for r in rows
    ]
    assert summary == [
        ("a", "git__status", "not required", None, "ok", 5),
        ("b", "git__reset", "denied", "user", "refused", 14),
        ("c", "git__log", "not required", None, "pending", None),
    ]
    assert rows[0].duration_ms == 4.5 and rows[0].read_only and rows[0].task_id == "t1"
    assert rows[0].requested_at + timedelta(milliseconds=1) == rows[0].completed_at


@pytest.mark.parametrize(
    ("reason", "cause", "not_sent"),
    [
        ("interrupted", "shutdown", "cancelled"),
        ("interrupted", "user", "cancelled"),
        ("replaced", "replaced", "aborted"),
        ("failed", "model", "aborted"),
    ],
)
def test_an_aborted_call_that_was_sent_is_unknown_not_cancelled(
    reason: Any, cause: Any, not_sent: str
) -> None:
    # A SIGINT while an MCP call runs: the call was sent (ToolCallStarted), so the server may
    # have acted on it; only the call still waiting for a slot never ran (docs/replay.md#audit).
    items = opening(
        *task("root", "t1"),
        (ToolCallRequested("a", "t__slow", '{"seconds": 60}', read_only=True), "root", "t1"),
        (ToolCallRequested("b", "t__echo", "{}", read_only=True), "root", "t1"),
        (ToolCallStarted("a", "t"), "root", "t1"),
        (TurnAborted(reason, cause, checkpoint=4 if reason == "interrupted" else 0), "root", "t1"),
    )
    rows = AuditProjection().fold(record(items)).rows
    assert [(r.call_id, r.outcome) for r in rows] == [("a", "unknown"), ("b", not_sent)]
    assert rows[0].completed_at is not None and rows[0].server == "t"


def test_timeline_shows_the_demo_in_order() -> None:
    session, items = demo_events(START)
    timeline = TimelineProjection().fold(MemoryStore().append(session, items, 0))
    kinds = [entry.kind for entry in timeline.entries]
    assert kinds[:5] == [
        "session_started",
        "conversation_opened",
        "task_started",
        "assistant",
        "tool_call",
    ]
    assert kinds.count("task_completed") == 2 and "aborted" in kinds
    assert timeline.entries[-1].text == f"task completed: {FINAL_ANSWER}"
    assert [e.seq for e in timeline.entries] == sorted(e.seq for e in timeline.entries)


PROJECTIONS: list[Projection[Any]] = [
    ActivityProjection(),
    ApprovalsProjection(),
    HistoryProjection(),
    TokensProjection(),
    AuditProjection(),
    TimelineProjection(),
    TaskQueueProjection(),
    ContextsProjection(),
]


@pytest.mark.parametrize("projection", PROJECTIONS, ids=lambda p: type(p).__name__)
@settings(max_examples=60, deadline=None)
@given(items=session_items(), cuts=st.lists(st.integers(0, 400), max_size=4))
def test_folding_in_pieces_from_saved_states_equals_one_fold(
    projection: Projection[Any], items: list[tuple[Any, str | None, str | None]], cuts: list[int]
) -> None:
    events = record(items)
    whole = projection.fold(events)
    state = projection.initial()
    start = 0
    for cut in [*sorted({min(c, len(events)) for c in cuts}), len(events)]:
        state = projection.load(projection.save(projection.fold(events[start:cut], state)))
        start = cut
    assert projection.save(state) == projection.save(whole)
    assert state == whole


@settings(max_examples=60, deadline=None)
@given(items=session_items())
def test_generated_sessions_always_give_api_valid_histories(
    items: list[tuple[Any, str | None, str | None]],
) -> None:
    state = HistoryProjection().fold(record(items))
    assert state.anomalies == []
    for conv in state.conversations.values():
        assert_api_valid([m.to_openai() for m in conv.messages])


@settings(max_examples=60, deadline=None)
@given(items=session_items(), cut=st.integers(0, 400))
def test_a_tail_holding_a_task_start_or_end_tells_what_runs_as_the_whole_log_does(
    items: list[tuple[Any, str | None, str | None]], cut: int
) -> None:
    events = record(items)
    whole = ActivityProjection().fold(events)
    tail = ActivityProjection().fold(events[min(cut, len(events)) :])
    if tail.bounded:  # what `plait sessions` widens a tail to (src/plait/cli/_listing.py)
        assert (tail.running, tail.asked) == (whole.running, whole.asked)
        assert tail.closed == whole.closed
