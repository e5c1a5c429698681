"""The content of an assistant message with tool calls and no text, on servers that take it
differently (docs/models.md#content-shapes), and failures that asking again cannot mend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripted import call, replayed, runtime_for

from plait.events import Event, ModelRequestFailed, SessionStarted
from plait.testing import PROFILES, RecordedRequest, ScriptedModelServer, Step

SCRIPT = [
    Step(tool_calls=[call("conv_list")]),
    Step(text="none open"),
    Step(text="still none"),
]

NO_KEY = "no key"


def shapes(requests: list[RecordedRequest]) -> list[Any]:
    """The content each request gave the assistant message with a tool call (``NO_KEY`` for
    none), or ``None`` for a request without one."""
    out: list[Any] = []
    for request in requests:
        called = [m for m in request.messages if m.get("tool_calls")]
        out.append(called[0].get("content", NO_KEY) if called else None)
    return out


def two_tasks(server: ScriptedModelServer, tmp_path: Path) -> tuple[list[Event], Any]:
    """A task with a tool call, then a second one on its history; return the replayed log and
    the second task's outcome."""
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        first = session.run("list them", timeout=30)
        assert first.ok, first.detail
        second = session.run("and now?", timeout=30)
    return replayed(tmp_path, session.session_id), second


def failures(events: list[Event]) -> list[ModelRequestFailed]:
    return [e.body for e in events if isinstance(e.body, ModelRequestFailed)]


@pytest.fixture
def earlier_plait(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start sessions as a plait of the given model protocol did (docs/models.md#the-protocol)."""

    def started_with(protocol: int) -> None:
        monkeypatch.setattr("plait.runtime.runtime.MODEL_PROTOCOL", protocol)

    return started_with


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_session_with_a_tool_call_goes_on_on_each_profile_at_once(
    tmp_path: Path, profile: str
) -> None:
    with ScriptedModelServer(SCRIPT, quirks=PROFILES[profile]) as server:
        events, second = two_tasks(server, tmp_path)
    assert second.last_assistant_message == "still none"
    assert shapes(server.requests) == [None, "", ""]  # "" is taken by them all: no probe
    assert failures(events) == []
    (started,) = [e.body for e in events if isinstance(e.body, SessionStarted)]
    assert started.settings.model_protocol == 2


@pytest.mark.parametrize(
    ("profile", "protocol", "sent", "refusal"),
    [
        ("llama-cpp-python", 1, NO_KEY, (None, "closed the stream before any reply")),
        # (its message names the content past the 300 characters the log keeps of it)
        ("llama-cpp-python", 0, None, (500, "validation errors for CreateChatCompletionRequest")),
        ("llama.cpp-old", 1, NO_KEY, (500, "Missing 'content'")),
        ("llama.cpp-old", 0, None, (500, "content must be a string or an array, not null")),
    ],
)
def test_a_session_an_earlier_plait_started_falls_back_once_and_remembers(
    tmp_path: Path,
    earlier_plait: Any,
    profile: str,
    protocol: int,
    sent: Any,
    refusal: tuple[int | None, str],
) -> None:
    earlier_plait(protocol)
    with ScriptedModelServer(SCRIPT, quirks=PROFILES[profile]) as server:
        events, second = two_tasks(server, tmp_path)
    assert second.last_assistant_message == "still none"
    # Refused once, asked again at once with "", and sent "" from then on: no second probe.
    assert shapes(server.requests) == [None, sent, "", ""]
    (failed,) = failures(events)
    assert (failed.status, failed.retry_in_sec) == (refusal[0], 0.0)
    assert refusal[1] in failed.error
    again = '; sent again with "content": "" on assistant messages with tool calls'
    assert failed.error.endswith(again)


def test_a_server_that_refuses_empty_content_is_sent_none(tmp_path: Path) -> None:
    with ScriptedModelServer(SCRIPT, quirks={"empty_content_refused"}) as server:
        events, second = two_tasks(server, tmp_path)
    assert second.last_assistant_message == "still none"
    assert shapes(server.requests) == [None, "", NO_KEY, NO_KEY]
    (failed,) = failures(events)
    assert failed.status == 400 and "sent again with no content" in failed.error


def test_a_server_that_takes_neither_shape_fails_the_task_in_one_line(tmp_path: Path) -> None:
    quirks = {"empty_content_refused", "missing_content"}
    with (
        ScriptedModelServer(SCRIPT, quirks=quirks) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("list them", timeout=30)
    assert (outcome.status, outcome.error_kind) == ("model_error", "unavailable")
    assert outcome.detail == (
        "the model server failed (500): Missing 'content' (ref: "
        "https://github.com/ggerganov/llama.cpp/issues/8367) (and so when sent again with no "
        "content)"
    )
    assert shapes(server.requests) == [None, "", NO_KEY]  # not sent a third time
    events = replayed(tmp_path, session.session_id)
    assert [f.retry_in_sec for f in failures(events)] == [0.0, None]


def test_an_empty_stream_that_is_not_the_shape_is_not_sent_again_and_again(
    tmp_path: Path,
) -> None:
    empty = Step(text="never sent", disconnect_after=0)
    script = [Step(tool_calls=[call("conv_list")]), empty, empty, empty]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("list them", timeout=30)
    assert outcome.status == "model_error"
    assert "closed the stream before any reply" in outcome.detail
    assert outcome.detail.endswith("(and so when sent again with no content)")
    assert shapes(server.requests) == [None, "", NO_KEY]
    replayed(tmp_path, session.session_id)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (Step(status=500, error_message="boom"), "the model server failed (500): boom"),
        (Step(disconnect_after=0), "the model server closed the stream before any reply"),
    ],
)
def test_the_same_answer_twice_is_not_asked_a_third_time(
    tmp_path: Path, answer: Step, said: str
) -> None:
    with (
        ScriptedModelServer([answer] * 3) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("hi", timeout=30)
    assert outcome.status == "model_error"
    assert outcome.detail.startswith(said)
    assert outcome.detail.endswith("(the same answer twice: not asked again)")
    assert len(server.requests) == 2
    events = replayed(tmp_path, session.session_id)
    assert [f.retry_in_sec is None for f in failures(events)] == [False, True]


def test_a_passing_overload_is_still_asked_again_until_the_attempts_are_spent(
    tmp_path: Path,
) -> None:
    overloaded = Step(status=503, error_message="overloaded")
    with (
        ScriptedModelServer([overloaded] * 3) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        outcome = runtime.start_session().run("hi", timeout=30)
    assert outcome.detail.endswith("(gave up after 3 attempts)")
    assert len(server.requests) == 3


def test_a_500_that_changes_is_asked_again(tmp_path: Path) -> None:
    script = [Step(status=500, error_message="busy"), Step(status=500), Step(text="hello")]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        outcome = runtime.start_session().run("hi", timeout=30)
    assert outcome.last_assistant_message == "hello"
    assert len(server.requests) == 3


def test_a_refusal_about_something_else_is_not_sent_again_with_another_shape(
    tmp_path: Path,
) -> None:
    policy = "The response was filtered due to the prompt triggering the content management policy"
    script = [Step(tool_calls=[call("conv_list")]), Step(status=400, error_message=policy)]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        outcome = runtime.start_session().run("list them", timeout=30)
    assert (outcome.status, outcome.error_kind) == ("model_error", "bad_request")
    assert outcome.detail == f"the model server refused the request (400): {policy}"
    assert shapes(server.requests) == [None, ""]
