"""The content of an assistant message with tool calls and no text, on servers that take it
differently (docs/models.md#content-shapes), and failures that asking again cannot mend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from scripted import call, replayed, runtime_for

from plait.actors._prompt import PromptView
from plait.events import Event, ModelRequestFailed, SessionStarted, ToolCall
from plait.events.projections import ChatMessage
from plait.testing import PROFILES, RecordedRequest, ScriptedModelServer, Step

SCRIPT = [
    Step(tool_calls=[call("conv_list")]),
    Step(text="none open"),
    Step(text="still none"),
]

NO_KEY = "no key"
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "conv_list", "arguments": "{}"}}


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
        monkeypatch.setattr("plait.runtime._runtime.MODEL_PROTOCOL", protocol)

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
    assert failed.status == 400
    again = 'sent again with no "content" key on assistant messages with tool calls'
    assert failed.error.endswith(again)


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
        "https://github.com/ggerganov/llama.cpp/issues/8367) "
        '(and again when sent with no "content" key)'
    )
    assert shapes(server.requests) == [None, "", NO_KEY]  # not sent a third time
    events = replayed(tmp_path, session.session_id)
    assert [f.retry_in_sec for f in failures(events)] == [0.0, None]


def test_an_empty_stream_that_is_not_the_shape_is_not_sent_again_and_again(
    tmp_path: Path,
) -> None:
    empty = Step(text="never sent", disconnect_after=0)
    script = [Step(tool_calls=[call("conv_list")]), empty, empty, Step(text="back")]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("list them", timeout=30)
        assert outcome.status == "model_error"
        assert "closed the stream before any reply" in outcome.detail
        assert outcome.detail.endswith('(and again when sent with no "content" key)')
        # The other shape failed too: it is not kept, and the next request is sent as before.
        again = session.run("and now?", timeout=30)
    assert again.last_assistant_message == "back"
    assert shapes(server.requests) == [None, "", NO_KEY, ""]
    replayed(tmp_path, session.session_id)


def test_an_empty_stream_with_no_tool_call_in_the_request_leaves_the_shape_alone(
    tmp_path: Path,
) -> None:
    script = [
        Step(disconnect_after=0),  # a proxy's glitch on a request the shape is not in
        Step(text="hello"),
        Step(tool_calls=[call("conv_list")]),
        Step(text="none open"),
    ]
    with ScriptedModelServer(script) as server:
        events, second = two_tasks(server, tmp_path)
    assert second.last_assistant_message == "none open"
    assert shapes(server.requests) == [None, None, None, ""]
    (failed,) = failures(events)
    assert "sent again" not in failed.error and failed.retry_in_sec != 0.0


def test_a_refusal_of_the_next_shape_about_something_else_does_not_blame_the_shape(
    tmp_path: Path,
) -> None:
    script = [
        Step(tool_calls=[call("conv_list")]),
        Step(status=500, error_message="Missing 'content'"),
        Step(status=400, error_message="the model is not loaded"),
    ]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        outcome = runtime.start_session().run("list them", timeout=30)
    assert outcome.detail == "the model server refused the request (400): the model is not loaded"
    assert shapes(server.requests) == [None, "", NO_KEY]


def test_every_session_of_the_runtime_is_sent_the_shape_the_server_took(
    tmp_path: Path, earlier_plait: Any
) -> None:
    earlier_plait(1)
    script = [*SCRIPT, Step(tool_calls=[call("conv_list")]), Step(text="one more")]
    with (
        ScriptedModelServer(script, quirks=PROFILES["llama.cpp-old"]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        first = runtime.start_session()
        assert first.run("list them", timeout=30).ok
        assert first.run("and now?", timeout=30).ok
        second = runtime.start_session()
        assert second.run("list them", timeout=30).ok
    # The second session's history is sent in the shape the first found, without a failure.
    assert shapes(server.requests) == [None, NO_KEY, "", "", None, ""]
    # The log hashes the messages as the session's protocol encodes them, whatever was sent:
    # a replay, which sends nothing, makes the same ModelRequested events.
    assert failures(replayed(tmp_path, second.session_id)) == []


def test_the_prompt_view_keeps_the_history_in_the_shape_the_client_sends() -> None:
    calls = (ToolCall("c1", "conv_list", "{}"),)
    history = [
        ChatMessage("user", "list them"),
        ChatMessage("assistant", None, calls),
        ChatMessage("tool", "[]", tool_call_id="c1"),
        ChatMessage("assistant", "none open"),
    ]
    view = PromptView(strict=True, empty="empty")
    view.sync(history[:2])
    sha, tokens = view.sha256, view.tokens()
    sent = view.messages("be brief", shape="null")
    assert msgspec.json.decode(view.messages("be brief")) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list them"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
    ]
    assert msgspec.json.decode(sent)[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [TOOL_CALL],
    }
    assert (view.sha256, view.tokens()) == (sha, tokens)  # on the protocol's bytes
    history.append(ChatMessage("assistant", None, calls))
    view.sync(history)  # grown in both shapes
    for shape in ("null", "omitted", "empty"):
        wire = msgspec.json.decode(view.messages("be brief", shape=shape))
        assert len(wire) == 6
        assert wire[1:5] == [m.to_openai(strict=True, empty=shape) for m in history[:4]]
        assert wire[5] == history[4].to_openai(strict=True, empty=shape)
    fresh = PromptView(strict=True, empty="empty")
    fresh.sync(history)
    assert fresh.sha256 == view.sha256
    assert view.messages("x", 3, "omitted") == fresh.messages("x", 3, "omitted")


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
