"""Compaction and bounded history (docs/compaction.md): a compact turn with its
own instructions whose summary replaces older history, the bounds that trim the oldest
messages, and the events that reference what they replace rather than copy it."""

from __future__ import annotations

import itertools
from pathlib import Path

from scripted import assert_histories_valid, call, runtime_for

from plait import HistorySettings
from plait.actors._compaction import COMPACT_INSTRUCTIONS
from plait.actors._prompt import PromptView
from plait.events import (
    ConversationContextChanged,
    Event,
    HistoryCompacted,
    ModelRequested,
    SqliteStore,
    TokensCounted,
    TurnAborted,
)
from plait.events.projections import ChatMessage
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def _compactions(events: list[Event]) -> list[HistoryCompacted]:
    return [e.body for e in events if isinstance(e.body, HistoryCompacted)]


def _assert_replays(tmp_path: Path, session_id: str) -> None:
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session_id, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()


def test_a_prompt_near_the_context_window_is_compacted_first(tmp_path: Path) -> None:
    script = [
        Step(text="one", prompt_tokens=300, completion_tokens=5),
        Step(tool_calls=[call("conv_list")], prompt_tokens=600, completion_tokens=5),
        Step(text="two", prompt_tokens=950, completion_tokens=5),
        Step(text="SUMMARY of one and two", prompt_tokens=900, completion_tokens=10),
        Step(text="three", prompt_tokens=120, completion_tokens=5),
    ]
    history = HistorySettings(context_window=1000, keep_recent_tokens=1)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=history) as runtime,
    ):
        session = runtime.start_session(base_instructions="Be brief.", user_instructions="Cite.")
        assert session.run("first", timeout=30).last_assistant_message == "one"
        assert session.run("second", timeout=30).last_assistant_message == "two"
        assert session.run("third", timeout=30).last_assistant_message == "three"
        events = runtime.store.read(session.session_id)
        after = session.history()
    compact, turn = server.requests[3], server.requests[4]
    # The compact turn has its own instructions and no tools; it summarises the older history.
    assert compact.messages[0] == {"role": "system", "content": COMPACT_INSTRUCTIONS}
    assert compact.tools is None
    # The history is one user message, a transcript: every server takes it, whatever it
    # requires of tool messages.
    (transcript,) = compact.messages[1:]
    assert transcript["role"] == "user"
    assert transcript["content"].startswith("user: Cite.\n\nuser: first\n\nassistant: one")
    assert "[tool call call_1] conv_list {}\n\n[tool result call_1]: {" in transcript["content"]
    # Its instructions were for that turn only: the next turn has the conversation's own.
    assert turn.messages[0] == {"role": "system", "content": "Be brief."}
    assert not any(isinstance(e.body, ConversationContextChanged) for e in events)
    # The summary stands for the older history; the standing instructions and the latest
    # messages stay as they were.
    assert [m["content"] for m in turn.messages[1:]] == ["Cite.", "SUMMARY of one and two", "third"]
    assert [m["content"] for m in after] == [
        "Cite.",
        "SUMMARY of one and two",
        "third",
        "three",
    ]
    (compacted,) = _compactions(events)
    assert compacted.trigger == "auto"
    assert compacted.tokens_before > 900 > compacted.tokens_after
    requested = [e.body for e in events if isinstance(e.body, ModelRequested)]
    assert [r.purpose for r in requested] == ["turn", "turn", "turn", "compact", "turn"]
    counted = [e.body for e in events if isinstance(e.body, TokensCounted)]
    assert {c.context_window for c in counted} == {1000}
    assert_histories_valid(events)
    _assert_replays(tmp_path, session.session_id)


def test_compact_on_request_summarises_and_leaves_a_short_history_alone(tmp_path: Path) -> None:
    script = [
        Step(text="one " * 40),
        Step(text="two " * 40),
        Step(text="the summary"),
        Step(text="three"),
    ]
    history = HistorySettings(keep_recent_tokens=60)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=history) as runtime,
    ):
        session = runtime.start_session()
        assert session.compact(timeout=30).ok  # nothing yet: no model request
        assert server.requests == []
        session.run("first", timeout=30)
        session.run("second", timeout=30)
        outcome = session.compact(timeout=30)
        assert outcome.ok, outcome
        assert session.run("third", timeout=30).last_assistant_message == "three"
        events = runtime.store.read(session.session_id)
    (compacted,) = _compactions(events)
    assert compacted.trigger == "manual"
    assert compacted.summary == "the summary"
    # The event names where the kept history starts; it does not copy the history.
    assert compacted.kept_from == 2
    contents = [m["content"] for m in server.requests[3].messages[1:]]
    assert contents == ["the summary", "second", "two " * 40, "third"]
    assert_histories_valid(events)
    _assert_replays(tmp_path, session.session_id)


def test_an_empty_summary_fails_the_task_and_keeps_the_history(tmp_path: Path) -> None:
    script = [Step(text="one " * 40), Step(text="two " * 40), Step(text="  ")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=HistorySettings(keep_recent_tokens=1)) as runtime,
    ):
        session = runtime.start_session()
        session.run("first", timeout=30)
        session.run("second", timeout=30)
        before = session.history()
        outcome = session.compact(timeout=30)
        assert (outcome.status, outcome.detail) == (
            "failed",
            "compaction failed: the model returned an empty summary",
        )
        assert session.history() == before
        events = runtime.store.read(session.session_id)
    assert _compactions(events) == []
    assert any(isinstance(e.body, TurnAborted) for e in events)


def test_a_bounded_history_drops_its_oldest_messages_and_says_so(tmp_path: Path) -> None:
    script = [
        step
        for n in range(10)
        for step in (Step(tool_calls=[call("conv_list")]), Step(text=f"answer {n}"))
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=HistorySettings(max_items=12)) as runtime,
    ):
        session = runtime.start_session(user_instructions="Stay on topic.")
        for n in range(10):
            assert session.run(f"question {n}", timeout=30).ok
        events = runtime.store.read(session.session_id)
        final = session.history()
    # Every request stayed within the bound (plus the message of the turn's own reply).
    assert max(len(r.messages) - 1 for r in server.requests) <= 12
    compactions = _compactions(events)
    assert compactions and {c.trigger for c in compactions} == {"bound"}
    # Trimmed to three quarters of the bound: now and then, not at every turn.
    assert len(compactions) <= len(server.requests) // 2
    assert compactions[0].summary.startswith("[") and "this history keeps 12 messages" in str(
        compactions[0].summary
    )
    # The standing instructions survive; a tool call is never parted from its answer.
    assert final[0]["content"] == "Stay on topic."
    assert final[-1]["content"] == "answer 9"
    assert_histories_valid(events)
    _assert_replays(tmp_path, session.session_id)


def test_a_token_bound_keeps_the_latest_messages_that_fit(tmp_path: Path) -> None:
    script = [Step(text=f"reply {n} " + "x" * 400) for n in range(4)]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=HistorySettings(max_tokens=300)) as runtime,
    ):
        session = runtime.start_session()
        for n in range(4):
            session.run(f"question {n}", timeout=30)
        events = runtime.store.read(session.session_id)
    last = server.requests[-1].messages
    assert last[-1]["content"] == "question 3"
    assert "reply 0" not in str(last)
    assert all(c.tokens_after <= 300 + 40 for c in _compactions(events))
    assert_histories_valid(events)


def test_the_prompt_view_encodes_each_message_once() -> None:
    history = [ChatMessage("user", f"message {n} " + "y" * n) for n in range(50)]
    view = PromptView()
    view.sync(history[:10])
    view.sync(history)
    assert len(view) == 50
    assert view.prefix_sha256(50) == view.sha256
    fresh = PromptView()
    fresh.sync(history)
    assert fresh.sha256 == view.sha256
    # The tail from first_within fits; one more message would not.
    start = view.first_within(200)
    assert view.tokens(start) <= 200 < view.tokens(start - 1)


def test_prompt_tokens_count_what_the_model_reported(tmp_path: Path) -> None:
    ids = itertools.count(1)
    script = [Step(text="one", prompt_tokens=890, completion_tokens=20), Step(text="x"), Step("y")]
    history = HistorySettings(context_window=1000, keep_recent_tokens=1)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=history, new_id=lambda: f"id-{next(ids)}") as rt,
    ):
        session = rt.start_session()
        session.run("first", timeout=30)
        # 890 + 20 reported tokens pass 0.9 of the window although the text is short.
        session.run("second", timeout=30)
    assert server.requests[1].messages[0]["content"] == COMPACT_INSTRUCTIONS


def test_a_resumed_session_keeps_the_history_settings_it_started_with(tmp_path: Path) -> None:
    script = [Step(text=f"answer {n}") for n in range(3)]
    with ScriptedModelServer(script) as server:
        with runtime_for(server, tmp_path) as runtime:
            session = runtime.start_session()
            session.run("one", timeout=30)
            session.run("two", timeout=30)
        tighter = HistorySettings(max_items=2)
        with runtime_for(server, tmp_path, history=tighter) as runtime:
            resumed = runtime.resume(session.session_id)
            assert resumed.run("three", timeout=30).ok
            events = runtime.store.read(session.session_id)
    assert _compactions(events) == []  # as the replay of its log will run it
    assert len(server.requests[-1].messages) == 6
    _assert_replays(tmp_path, session.session_id)
