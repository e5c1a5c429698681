"""Sessions on the Responses API (``wire_api = "responses"``, docs/models.md#wires).

What a user of the Responses API checks: each request's body (instructions, input items, the
tools, ``store: false`` with encrypted reasoning asked for); a reasoning item sent back, whole,
with the next request of the turn and of every later task, after a ``kill -9`` too; a
``conv_create`` hand-off; a reply cut by its cap; a session that changes wire between runs;
approvals, an interrupt and the spans, as on the chat wire; and each session replayed clean.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from chat_rules import chat_messages, responses_problems
from scripted import assert_histories_valid, call, replayed, runtime_for, went_on_problems
from support import wait_for_event

from plait import ApprovalDecision, ApprovalRequest
from plait._scripted_responses import encrypted_reasoning
from plait.events import (
    AgentMessageDelta,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    ReasoningItem,
    SqliteStore,
    TaskCompleted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.telemetry import spans_of
from plait.testing import ScriptedModelServer, Step

RESPONSES = {"wire_api": "responses"}

THINK = Step(reasoning="The helper should count.", text="Asking.", tool_calls=[])
"""A reply with reasoning (its calls given where it is used)."""


def reasoning_sent(request_input: list[dict[str, object]]) -> list[object]:
    """The ``encrypted_content`` of each reasoning item a request sends back, in order."""
    return [item["encrypted_content"] for item in request_input if item["type"] == "reasoning"]


def test_a_turn_sends_its_reply_and_the_reasoning_back_as_input_items(
    tmp_path: Path,
) -> None:
    first = Step(
        reasoning="Look the time up first.",
        text="Checking.",
        tool_calls=[call("conv_list")],
    )
    with (
        ScriptedModelServer([first, Step(text="Nothing else is open.")]) as server,
        runtime_for(server, tmp_path, RESPONSES) as runtime,
    ):
        session = runtime.start_session(base_instructions="Be brief.")
        outcome = session.run("What is open?", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "Nothing else is open."
        asked, went_on = server.requests
        assert {asked.wire, went_on.wire} == {"responses"}
        assert asked.instructions == went_on.instructions == "Be brief."
        assert asked.messages == []  # no chat messages: input items
        assert asked.input == [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "What is open?"}],
            }
        ]
        assert (asked.body["store"], asked.body["include"], asked.body["stream"]) == (
            False,
            ["reasoning.encrypted_content"],
            True,
        )
        tools = {tool["name"]: tool for tool in asked.tools or []}
        assert tools["conv_list"]["type"] == "function" and tools["conv_list"]["strict"] is False
        assert "function" not in tools["conv_list"]  # flat, as the Responses API takes tools
        # The second request of the turn: the first reply whole, its reasoning first.
        assert went_on.input[1:] == [
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Look the time up first."}],
                "encrypted_content": encrypted_reasoning(first),
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking."}],
            },
            {"type": "function_call", "call_id": "call_1", "name": "conv_list", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": went_on.input[4]["output"],
            },
        ]
        assert responses_problems(went_on) == []
        events = runtime.store.read(session.session_id)
    requested = [e.body for e in events if isinstance(e.body, ModelRequested)]
    assert [r.wire_api for r in requested] == ["responses", "responses"]
    replies = [e.body for e in events if isinstance(e.body, ModelResponded)]
    assert replies[0].reasoning_items == [
        ReasoningItem("rs_1", ["Look the time up first."], [], encrypted_reasoning(first))
    ]
    assert replies[0].reasoning == "Look the time up first."  # as on the chat wire
    assert replies[0].usage is not None and replies[0].usage.reasoning_tokens > 0
    replayed(tmp_path, session.session_id)


def test_a_hand_off_runs_on_responses_and_replays_clean(tmp_path: Path) -> None:
    asking = Step(
        reasoning="The helper should count.",
        text="Asking a helper.",
        tool_calls=[call("conv_create", user_instruction="Count to 3.")],
    )
    counting = Step(reasoning="One, two, three.", text="1 2 3")
    with (
        ScriptedModelServer([asking, counting, Step(text="It counted: 1 2 3")]) as server,
        runtime_for(server, tmp_path, RESPONSES) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("Get a helper to count.", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "It counted: 1 2 3"
        _, helper, continuation = server.requests
        assert chat_messages(helper)[1:] == [{"role": "user", "content": "Count to 3."}]
        assert reasoning_sent(helper.input) == []  # the helper's history is its own
        # The caller goes on with its own reasoning and the helper's answer to its call.
        assert reasoning_sent(continuation.input) == [encrypted_reasoning(asking)]
        assert continuation.input[-1]["type"] == "function_call_output"
        assert (
            json.loads(str(continuation.input[-1]["output"]))["last_assistant_message"] == "1 2 3"
        )
        problems = went_on_problems(runtime.store, session.session_id, server.requests)
        assert problems == []
    replayed(tmp_path, session.session_id)


def test_a_reply_cut_at_its_cap_ends_the_task_truncated(tmp_path: Path) -> None:
    cut = Step(text="A long answer that", finish_reason="length")
    with (
        ScriptedModelServer([cut]) as server,
        runtime_for(server, tmp_path, {**RESPONSES, "max_output_tokens": 5}) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("Go on at length.", timeout=30)
        assert server.requests[0].body["max_output_tokens"] == 5
        assert outcome.status == "truncated"
        events = runtime.store.read(session.session_id)
    [reply] = [e.body for e in events if isinstance(e.body, ModelResponded)]
    assert (reply.text, reply.finish_reason) == ("A long answer that", "length")
    [ended] = [e.body for e in events if isinstance(e.body, TaskCompleted)]
    assert ended.cut_off == "length"


def test_a_session_changes_wire_between_runs(tmp_path: Path) -> None:
    thinking = Step(reasoning="Say hi.", text="Hi.")
    with ScriptedModelServer([thinking, Step(text="Hi again.")]) as server:
        with runtime_for(server, tmp_path) as runtime:
            session = runtime.start_session()
            assert session.run("Hello.", timeout=30).ok
            session.release(timeout=30)
        with runtime_for(server, tmp_path, RESPONSES) as runtime:
            resumed = runtime.resume(session.session_id)
            assert resumed.run("Hello again.", timeout=30).ok
            events = runtime.store.read(session.session_id)
        chat, responses = server.requests
    assert (chat.wire, responses.wire) == ("chat", "responses")
    # What the chat wire recorded is sent as items; its reasoning had no encrypted content.
    assert chat_messages(responses)[1:] == [
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Hello again."},
    ]
    assert reasoning_sent(responses.input) == []
    requested = [e.body for e in events if isinstance(e.body, ModelRequested)]
    assert [r.wire_api for r in requested] == ["chat", "responses"]
    replayed(tmp_path, session.session_id)


OWNER = textwrap.dedent(
    """
    import sys
    from plait.actors import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings

    db, base_url = sys.argv[1:3]
    settings = ModelSettings(base_url=base_url, api_key="k", model="m", wire_api="responses")
    runtime = Runtime(db, RuntimeSettings(model=settings, lease_sec=1.0))
    session = runtime.start_session()
    print(session.session_id, flush=True)
    session.run("Get a helper to count.", timeout=60)
    """
)


@pytest.mark.parametrize("kill_at", [ModelResponded, TurnAborted])
def test_a_session_killed_mid_hand_off_resumes_with_its_reasoning(
    tmp_path: Path, kill_at: type
) -> None:
    db = tmp_path / "plait.db"
    asking = Step(
        reasoning="The helper should count.",
        text="Asking a helper.",
        tool_calls=[call("conv_create", user_instruction="Count to 3.")],
    )
    slow = Step(text="1 2 3", chunk_chars=1, chunk_delay=0.5)  # the helper, killed under way
    with ScriptedModelServer([asking, slow]) as server, SqliteStore(db) as store:
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, str(db), server.base_url],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert owner.stdout is not None
            session_id = owner.stdout.readline().strip()
            wait_for_event(store, session_id, kill_at)
        finally:
            os.killpg(owner.pid, signal.SIGKILL)
            owner.communicate(timeout=30)  # and close its pipe
        server.push(*[Step(text="Went on.")] * 4)  # what waited, then the new input
        with runtime_for(server, tmp_path, RESPONSES, store=store) as runtime:
            session = runtime.resume(session_id)
            outcome = session.run("Are you there?", timeout=60)
            assert outcome.ok and outcome.last_assistant_message == "Went on."
            session.close()
        last = server.requests[-1]
        # The reasoning recorded before the kill goes out again, from the log.
        assert reasoning_sent(last.input) == [encrypted_reasoning(asking)]
        assert went_on_problems(store, session_id, server.requests[2:]) == []
        events = store.read(session_id)
    aborted = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert "crashed" in [a.reason for a in aborted]
    answers = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert [a.call_id for a in answers] == ["call_1"]  # the hand-off answered once
    assert_histories_valid(events)


def test_a_server_that_refuses_encrypted_reasoning_is_asked_without_it(tmp_path: Path) -> None:
    refused = Step(status=400, error_message="Unknown parameter: 'include'.")
    script = [refused, Step(text="Hi."), Step(text="Hi again.")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, RESPONSES) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("Hello.", timeout=30).ok
        assert session.run("Hello again.", timeout=30).ok  # not asked for it again
        assert ["include" in r.body for r in server.requests] == [True, False, False]
        events = runtime.store.read(session.session_id)
    [failed] = [e.body for e in events if isinstance(e.body, ModelRequestFailed)]
    assert failed.status == 400 and "sent again without include" in failed.error


def fetch(key: str) -> str:
    """Fetch the value of ``key``."""
    return f"value of {key}"


def test_approvals_an_interrupt_and_spans_are_as_on_the_chat_wire(tmp_path: Path) -> None:
    def approver(request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved='"b"' not in request.arguments, reason="not b")

    script = [
        Step(reasoning="Fetch both.", tool_calls=[call("fetch", key="a"), call("fetch", key="b")]),
        Step(text="Only a."),
        Step(text="slow " * 200, chunk_chars=5, chunk_delay=0.05),  # interrupted
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server,
            tmp_path,
            RESPONSES,
            tools=[fetch],
            approval_policy="untrusted",
            approver=approver,
        ) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("Fetch a and b.", timeout=30)
        assert outcome.last_assistant_message == "Only a."
        answers = [i for i in server.requests[1].input if i["type"] == "function_call_output"]
        assert [a["output"] for a in answers] == [
            "value of a",
            "not run: denied by approver: not b",
        ]  # what the model was told, as on the chat wire
        with session.subscribe() as feed:
            session.submit("Go on at length.")
            while not isinstance(feed.get(timeout=30), AgentMessageDelta):
                pass
            session.interrupt()
        aborted = wait_for_event(runtime.store, session.session_id, TurnAborted)
        events = runtime.store.read(session.session_id)
    assert isinstance(aborted.body, TurnAborted) and aborted.body.reason == "interrupted"
    spans = spans_of(session.session_id, events)
    names = sorted(span.name for span in spans if not span.name.startswith("invoke_agent"))
    assert names == ["chat scripted-model"] * 3 + ["execute_tool fetch"] * 2
    replayed(tmp_path, session.session_id)


STORED = {**RESPONSES, "store": True}


def test_a_stored_response_is_gone_on_from_and_sent_whole_when_the_server_lost_it(
    tmp_path: Path,
) -> None:
    first = Step(reasoning="List them.", tool_calls=[call("conv_list")])
    with ScriptedModelServer([first, Step(text="One."), Step(text="Still one.")]) as server:
        with runtime_for(server, tmp_path, STORED) as runtime:
            session = runtime.start_session()
            assert session.run("What is open?", timeout=30).ok
            assert session.run("And now?", timeout=30).ok
            session.release(timeout=30)
        asked, went_on, again = server.requests
    assert asked.body["store"] is True and "previous_response_id" not in asked.body
    # Each request goes on from the last reply, sending only what came after it.
    assert went_on.body["previous_response_id"] == "resp_1"
    assert [i["type"] for i in went_on.input] == ["function_call_output"]
    assert again.body["previous_response_id"] == "resp_2"
    assert chat_messages(again)[1:] == [{"role": "user", "content": "And now?"}]
    # A server that no longer has the response (another one, here) is sent the whole history.
    with ScriptedModelServer([Step(text="Back."), Step(text="Yes.")]) as other:
        with runtime_for(other, tmp_path, STORED) as runtime:
            resumed = runtime.resume(session.session_id)
            assert resumed.run("Are you there?", timeout=30).ok
            assert resumed.run("Sure?", timeout=30).ok
            events = runtime.store.read(session.session_id)
        refused, whole, chained = other.requests
    assert refused.body["previous_response_id"] == "resp_3"
    assert "previous_response_id" not in whole.body
    assert reasoning_sent(whole.input) == [encrypted_reasoning(first)]
    assert len(chat_messages(whole)) == 1 + 7  # instructions, then the history, whole
    assert chained.body["previous_response_id"] == "resp_1"  # this server's first
    [failed] = [e.body for e in events if isinstance(e.body, ModelRequestFailed)]
    assert failed.status == 400
    assert "sent again with the whole history: the server no longer has response resp_3" in (
        failed.error
    )
    requested = [e.body for e in events if isinstance(e.body, ModelRequested)]
    assert [r.previous_response_id for r in requested] == [
        "",
        "resp_1",
        "resp_2",
        "resp_3",
        "resp_1",
    ]
    replayed(tmp_path, session.session_id)


def test_after_a_compaction_a_request_does_not_go_on_from_a_stored_response(
    tmp_path: Path,
) -> None:
    script = [Step(text="One."), Step(text="Two."), Step(text="SUMMARY: two."), Step(text="Three.")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, STORED) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("Count.", timeout=30).ok
        assert session.run("More.", timeout=30).ok
        assert server.requests[1].body["previous_response_id"] == "resp_1"
        assert session.compact(keep_recent_tokens=0, timeout=30).ok
        assert session.run("Go on.", timeout=30).ok
        last = server.requests[-1]
    # The server's stored chain still holds what the summary replaced: not gone on from.
    assert "previous_response_id" not in last.body
    assert chat_messages(last)[-1] == {"role": "user", "content": "Go on."}
    assert "SUMMARY: two." in json.dumps(last.input)
    replayed(tmp_path, session.session_id)
