"""What a session asks of the model server, and how the ends of its replies end its tasks."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted import call, replayed, runtime_for

from plait.events import (
    MODEL_PROTOCOL,
    SessionStarted,
    TaskCompleted,
    TokensCounted,
    ToolCallCompleted,
)
from plait.testing import ScriptedModelServer, Step


def test_the_options_are_sent_and_recorded_and_a_resume_sends_its_own(tmp_path: Path) -> None:
    options = {
        "max_output_tokens": 64,
        "temperature": 0.0,
        "top_p": 0.5,
        "seed": 7,
        "stop": ["END"],
        "reasoning_effort": "low",
        "parallel_tool_calls": False,
        "extra_body": {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}},
        "headers": {"X-Trace": "t-1", "X-Api-Key": "secret-value"},
    }
    script = [Step(tool_calls=[call("conv_list")]), Step(text="done"), Step(text="again")]
    with ScriptedModelServer(script) as server:
        with runtime_for(server, tmp_path, options) as runtime:
            session = runtime.start_session()
            assert session.run("list them", timeout=30).ok
            session_id = session.session_id
        # Resumed by a runtime configured otherwise, it is sent what that runtime asks for.
        with runtime_for(server, tmp_path, dict(temperature=1.5)) as runtime:
            assert runtime.resume(session_id).run("once more", timeout=30).ok
    *started, resumed = server.requests
    assert resumed.body["temperature"] == 1.5 and "max_tokens" not in resumed.body
    for request in started:
        body = request.body
        assert body["max_tokens"] == 64 and "max_completion_tokens" not in body
        assert (body["temperature"], body["top_p"], body["seed"]) == (0.0, 0.5, 7)
        assert (body["stop"], body["reasoning_effort"]) == (["END"], "low")
        assert body["parallel_tool_calls"] is False
        assert body["top_k"] == 20
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert started[0].headers["x-trace"] == "t-1"
    assert started[0].headers["x-api-key"] == "secret-value"
    events = replayed(tmp_path, session_id)
    started = events[0].body
    assert isinstance(started, SessionStarted) and started.settings is not None
    assert started.settings.model_protocol == MODEL_PROTOCOL
    recorded = started.settings.model
    assert recorded.max_output_tokens == 64 and recorded.extra_body["top_k"] == 20
    # The log keeps which headers were sent, but not a credential's value.
    assert recorded.headers == {"X-Trace": "t-1", "X-Api-Key": "[redacted]"}


def test_the_cap_goes_in_the_field_the_settings_name(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="short")]) as server,
        runtime_for(
            server, tmp_path, dict(max_output_tokens=32, max_tokens_field="max_completion_tokens")
        ) as runtime,
    ):
        assert runtime.start_session().run("hi", timeout=30).ok
    (request,) = server.requests
    assert request.body["max_completion_tokens"] == 32 and "max_tokens" not in request.body


def test_no_options_sends_none_of_them(tmp_path: Path) -> None:
    with ScriptedModelServer([Step(text="hi")]) as server, runtime_for(server, tmp_path) as runtime:
        assert runtime.start_session().run("hi", timeout=30).ok
    (request,) = server.requests
    assert set(request.body) == {"model", "messages", "tools", "stream", "stream_options"}


def test_an_assistant_message_with_calls_and_no_text_has_empty_content(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("conv_list")]), Step(text="none open")]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("list them", timeout=30).ok
    assistant = server.requests[1].messages[2]
    assert assistant["role"] == "assistant" and "tool_calls" in assistant
    assert assistant["content"] == ""
    replayed(tmp_path, session.session_id)


@pytest.mark.parametrize(
    ("finish", "status"), [("length", "truncated"), ("content_filter", "filtered")]
)
def test_a_reply_the_server_cut_off_ends_its_task_so(
    tmp_path: Path, finish: str, status: str
) -> None:
    script = [Step(text="The answer is", finish_reason=finish)]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("what is it?", timeout=30)
    assert (outcome.status, outcome.ok) == (status, False)
    assert outcome.last_assistant_message == "The answer is"  # what there was is kept
    assert f"finish_reason {finish}" in outcome.detail
    events = replayed(tmp_path, session.session_id)
    (completed,) = [e.body for e in events if isinstance(e.body, TaskCompleted)]
    assert completed.cut_off == finish


def test_the_calls_of_a_reply_cut_off_are_not_run(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("conv_list")], finish_reason="length")]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("list them", timeout=30).status == "truncated"
    events = replayed(tmp_path, session.session_id)
    (answer,) = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert answer.outcome == "refused" and "cut off" in str(answer.output)


def test_a_server_that_sends_no_usage_is_counted_estimated(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("conv_list")], send_usage=False),
        Step(text="x" * 400, send_usage=False),
    ]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("list them", timeout=30).ok
        (stats,) = session.stats().values()
    events = replayed(tmp_path, session.session_id)
    counted = [e.body for e in events if isinstance(e.body, TokensCounted)]
    assert [c.estimated for c in counted] == [True, True]
    # Bytes over four: the reply's text is 400 characters.
    assert counted[1].usage.completion_tokens == 100
    assert counted[1].usage.prompt_tokens > counted[0].usage.prompt_tokens > 0
    assert stats.estimated == 2 and stats.usage.prompt_tokens > 0
