"""Sessions through servers that differ from OpenAI's: ``ScriptedModelServer``'s quirks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripted import call, replayed, runtime_for

from plait.events import (
    Event,
    HistoryCompacted,
    ModelRequestFailed,
    ModelResponded,
    TokensCounted,
    ToolCallCompleted,
)
from plait.testing import QUIRKS, ScriptedModelServer, Step

NEEDS: dict[str, dict[str, Any]] = {
    "reasoning_required": {"send_reasoning": True},
    "max_completion_tokens_only": {"max_output_tokens": 1000},
    "reasoning_text_required": {"wire_api": "responses"},  # a quirk of that wire
}
"""The settings a session needs to get through a quirk."""


def _session(server: ScriptedModelServer, tmp_path: Path, **options: Any) -> list[Event]:
    """Two calls in one reply, the answer, a second task on that history, then a compaction
    of it; return the replayed log."""
    with runtime_for(server, tmp_path, options) as runtime:
        session = runtime.start_session()
        first = session.run("list them twice", timeout=30)
        assert first.ok, first.detail
        second = session.run("and again?", timeout=30)
        assert (second.status, second.last_assistant_message) == ("completed", "again")
        compacted = session.compact(keep_recent_tokens=0, timeout=30)
        assert compacted.ok, compacted.detail
    return replayed(tmp_path, session.session_id)


SCRIPT = [
    Step(reasoning="I should list them.", tool_calls=[call("conv_list"), call("conv_list")]),
    Step(text="two lists"),
    Step(text="again"),
    Step(text="SUMMARY: listed twice"),
]


@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_a_session_with_tool_calls_goes_on_and_replays_under_each_quirk(
    tmp_path: Path, quirk: str
) -> None:
    with ScriptedModelServer(SCRIPT, quirks={quirk}) as server:
        events = _session(server, tmp_path, **NEEDS.get(quirk, {}))
    answers = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert [a.outcome for a in answers] == ["ok", "ok"]
    reply = next(e.body for e in events if isinstance(e.body, ModelResponded))
    assert [c.name for c in reply.tool_calls] == ["conv_list", "conv_list"]
    assert len({c.id for c in reply.tool_calls}) == 2  # made up when the server sent none
    assert reply.reasoning == "I should list them."
    (compacted,) = [e.body for e in events if isinstance(e.body, HistoryCompacted)]
    assert compacted.summary == "SUMMARY: listed twice"
    counted = [e.body for e in events if isinstance(e.body, TokensCounted)]
    assert len(counted) == 4 and all(c.usage.prompt_tokens > 0 for c in counted)
    assert all(c.estimated for c in counted) == (quirk in ("no_usage", "no_stream_options"))


def test_a_strict_server_is_sent_no_null_content(tmp_path: Path) -> None:
    with (
        ScriptedModelServer(SCRIPT, quirks={"strict_null_content"}) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        assert runtime.start_session().run("list them twice", timeout=30).ok
    assistant = server.requests[1].messages[2]
    assert assistant["content"] == "" and len(assistant["tool_calls"]) == 2


def test_a_server_that_refuses_stream_options_is_asked_again_without(tmp_path: Path) -> None:
    with ScriptedModelServer(SCRIPT, quirks={"no_stream_options"}) as server:
        events = _session(server, tmp_path)
    asked = [("stream_options" in r.body) for r in server.requests]
    assert asked == [True, False, False, False, False]  # once refused, never sent again
    (failed,) = [e.body for e in events if isinstance(e.body, ModelRequestFailed)]
    assert failed.status == 400 and failed.retry_in_sec == 0.0
    assert "sent again without stream_options" in failed.error


def test_a_server_that_wants_max_completion_tokens_gets_it(tmp_path: Path) -> None:
    with ScriptedModelServer(SCRIPT, quirks={"max_completion_tokens_only"}) as server:
        _session(server, tmp_path, max_output_tokens=1000)
    fields = [
        ("max_tokens" in r.body, r.body.get("max_completion_tokens")) for r in server.requests
    ]
    assert fields == [(True, None)] + [(False, 1000)] * 4


def test_a_server_that_refuses_reasoning_items_without_text_is_sent_none(
    tmp_path: Path,
) -> None:
    with ScriptedModelServer(SCRIPT, quirks={"reasoning_text_required"}) as server:
        events = _session(server, tmp_path, wire_api="responses")
    sent = [[i["type"] for i in r.input if i["type"] == "reasoning"] for r in server.requests]
    assert sent == [[], ["reasoning"], [], [], []]  # refused once, then never sent again
    (failed,) = [e.body for e in events if isinstance(e.body, ModelRequestFailed)]
    assert failed.status == 400 and failed.retry_in_sec == 0.0
    assert "item['content'] is not an array" in failed.error
    assert "sent again without the reasoning items that hold no reasoning text" in failed.error


def test_reasoning_goes_back_only_when_asked(tmp_path: Path) -> None:
    with (
        ScriptedModelServer(SCRIPT, quirks={"reasoning_required"}) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        outcome = runtime.start_session().run("list them twice", timeout=30)
    assert (outcome.status, outcome.error_kind) == ("model_error", "bad_request")
    assert "reasoning_content" in outcome.detail
    with ScriptedModelServer(SCRIPT, quirks={"reasoning_required"}) as server:
        _session(server, tmp_path / "sent", send_reasoning=True)
    assistant = server.requests[1].messages[2]
    assert assistant["reasoning_content"] == "I should list them."


def test_a_compaction_sends_a_history_a_server_without_tools_accepts(tmp_path: Path) -> None:
    with ScriptedModelServer(SCRIPT, quirks={"tools_required"}) as server:
        _session(server, tmp_path)
    compaction = server.requests[-1]
    assert compaction.tools is None
    assert [m["role"] for m in compaction.messages] == ["system", "user"]
    assert "[tool call call_1] conv_list {}" in compaction.messages[1]["content"]


def test_a_reply_over_the_cap_ends_the_task_truncated(tmp_path: Path) -> None:
    script = [Step(text="a long story " * 20)]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, dict(max_output_tokens=8)) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("tell me a story", timeout=30)
    assert server.requests[0].body["max_tokens"] == 8
    assert outcome.status == "truncated"
    assert outcome.last_assistant_message == ("a long story " * 20)[:32]
    replayed(tmp_path, session.session_id)
