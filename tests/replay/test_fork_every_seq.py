"""A fork cut at any seq goes on with requests a strict model server accepts.

One session, recorded once for the module against a real MCP server (over streamable HTTP,
so each fork connects in milliseconds), holds an MCP call, a parallel batch of read-only
calls, a ``conv_create`` hand-off whose helper calls a tool, and a ``conv_send`` hand-off.
It is forked at every seq; each fork is resumed in the same runtime and given one more input,
and every model request it makes must be one OpenAI would take, its audit must show no call
pending, and it must verify and replay clean. All of it on either wire: on the Responses API
the replies carry reasoning items, which every later request must send back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import pytest
from chat_rules import chat_messages, chat_problems
from scripted import HttpServer, assert_histories_valid, call, went_on_problems

from plait._scripted_responses import encrypted_reasoning
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ConversationOpened,
    Event,
    ModelResponded,
    SqliteStore,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.replay import fork
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._handoffs import FORK_CUT, NOBODY_WAITS
from plait.runtime._recovery import HANDOFF_CUT
from plait.testing import RecordedRequest, ScriptedModelServer, Step

WENT_ON = Step(text="Went on.")
"""What the model answers every request of a fork: the fork goes its own way."""


@dataclass
class Source:
    """The recorded session, and the runtime, store and servers its forks go on with."""

    runtime: Runtime
    store: SqliteStore
    model: ScriptedModelServer
    session_id: str
    events: list[Event]
    wire: str


@pytest.fixture(scope="module", params=["chat", "responses"])
def source(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Source]:
    tmp = tmp_path_factory.mktemp("forks")
    tools = HttpServer()
    script = [
        Step(reasoning="Note it.", tool_calls=[call("t__note", key="k", text="one")]),  # MCP
        Step(tool_calls=[call("t__echo", text="a"), call("t__add", a=1, b=2)]),  # parallel
        Step(text="Tools done."),
        Step(
            reasoning="A helper counts.",
            text="Helping.",
            tool_calls=[call("conv_create", user_instruction="Count.")],
        ),
        Step(tool_calls=[call("t__echo", text="counting")]),  # the helper calls a tool
        Step(text="Two."),
        Step(text="The helper counted two."),
    ]
    with ScriptedModelServer(script) as model, SqliteStore(tmp / "plait.db") as store:
        settings = ModelSettings(
            base_url=model.base_url, api_key="k", model="scripted-model", wire_api=request.param
        )
        runtime = Runtime(
            store,
            RuntimeSettings(
                model=settings,
                mcp_servers={"t": McpServerConfig(url=tools.url)},
                workdir=tmp,
                expire_every_sec=None,
            ),
        )
        try:
            session = runtime.start_session()
            assert session.run("Use the tools.", timeout=60).ok
            assert session.run("Make a helper.", timeout=60).ok
            opened = [e for e in store.read(session.session_id) if e.seq > 2]
            [helper] = [e.conversation_id for e in opened if isinstance(e.body, ConversationOpened)]
            model.push(
                Step(tool_calls=[call("conv_send", conversation_id=helper, text="Again?")]),
                Step(text="Still two."),
                Step(text="Still two, it says."),
            )
            assert session.run("Ask the helper again.", timeout=60).ok
            session.close()
            events = store.read(session.session_id)
            yield Source(runtime, store, model, session.session_id, events, request.param)
        finally:
            runtime.close()
            tools.close()


def go_on(source: Source, at: int, name: str) -> tuple[str, list[RecordedRequest]]:
    """Fork the source at seq ``at`` as session ``name``, resume it, give it one more input
    and close it; return its id and the model requests it made."""
    before = len(source.model.requests)
    forked = fork(source.store, source.session_id, at, new_session_id=name)
    session = source.runtime.resume(forked)
    source.model.push(*[WENT_ON] * 4)  # for the tasks it had waiting, then the input
    outcome = session.run("Go on.", timeout=60)
    session.close()
    assert outcome.last_assistant_message == "Went on.", (at, outcome)
    return forked, source.model.requests[before:]


def test_the_check_refuses_what_openai_refuses() -> None:
    asked = {"role": "assistant", "tool_calls": [{"id": "c1"}, {"id": "c2"}]}
    system, user = {"role": "system"}, {"role": "user"}
    answer = {"role": "tool", "tool_call_id": "c1"}
    other = {"role": "tool", "tool_call_id": "c2"}
    assert chat_problems([system, user, asked, answer, other, user]) == []
    assert chat_problems([system, user, asked, answer, user]) == [
        "message 4 (user): calls ['c2'] unanswered before it"
    ]
    assert chat_problems([user, system]) == [
        "the first message is not the system message",
        "message 1 (system): a system message after the first",
    ]
    assert chat_problems([system, user, answer]) == [
        "message 2 (tool): answers c1, no call of the message before"
    ]
    assert chat_problems([system, asked, answer, answer, other]) == [
        "message 3 (tool): call c1 answered twice"
    ]


def test_a_fork_at_every_seq_goes_on_with_valid_requests(source: Source) -> None:
    sent = [e.body for e in source.events if isinstance(e.body, ToolCallStarted)]
    assert [s.call_id for s in sent] == ["call_1", "call_2", "call_3", "call_5"]
    order = [(type(e.body).__name__, getattr(e.body, "call_id", "")) for e in source.events]
    both = order.index(("ToolCallStarted", "call_3"))
    assert both < order.index(("ToolCallCompleted", "call_2"))  # the batch ran in parallel
    ended = [e.body for e in source.events if isinstance(e.body, TurnAborted)]
    assert [(a.reason, a.awaiting_call_ids) for a in ended] == [
        ("replaced", ["call_4"]),
        ("replaced", ["call_6"]),
    ]
    failures: dict[int, list[str]] = {}
    forks = []
    replied = next(e.seq for e in source.events if isinstance(e.body, ModelResponded))
    for at in range(2, source.events[-1].seq + 1):
        forked, requests = go_on(source, at, f"fork-{at}")
        forks.append(forked)
        assert chat_messages(requests[-1])[-1] == {"role": "user", "content": "Go on."}
        if source.wire == "responses":  # the first reply's reasoning, sent back once it is in
            sent = [i for i in requests[-1].input if i["type"] == "reasoning"]
            expected = [encrypted_reasoning(Step(reasoning="Note it."))] if at >= replied else []
            assert [i["encrypted_content"] for i in sent[:1]] == expected, at
        problems = went_on_problems(source.store, forked, requests)
        if problems:
            failures[at] = problems
    assert failures == {}
    for forked in forks:
        assert_histories_valid(source.store.read(forked))


def _answer(source: Source, forked: str, call_id: str) -> ToolCallCompleted:
    [answer] = [
        e.body
        for e in source.store.read(forked)
        if isinstance(e.body, ToolCallCompleted) and e.body.call_id == call_id
    ]
    return answer


def test_a_hand_off_cut_from_its_continuation_is_answered_and_its_task_dropped(
    source: Source,
) -> None:
    create, send = [e for e in source.events if isinstance(e.body, TurnAborted)]
    assert isinstance(create.body, TurnAborted) and isinstance(send.body, TurnAborted)
    helper = [e for e in source.events if isinstance(e.body, ConversationOpened)][1].conversation_id
    # Cut right after the caller ended: nothing queued answers the call.
    forked, _ = go_on(source, create.seq, "cut-create")
    answer = _answer(source, forked, create.body.awaiting_call_ids[0])
    assert (answer.outcome, answer.aborted_by) == ("error", "fork")
    assert json.loads(str(answer.output)) == {
        "conversation_id": helper,
        "first_user_message": "Count.",
        "first_items_count": 1,
        "last_assistant_message": None,
        "error": FORK_CUT,
    }
    # Cut once the helper's task is queued, not the continuation: the task is dropped.
    forked, _ = go_on(source, send.seq + 1, "cut-send")
    answer = _answer(source, forked, send.body.awaiting_call_ids[0])
    assert json.loads(str(answer.output)) == {
        "conversation_id": helper,
        "last_assistant_message": None,
        "error": FORK_CUT,
    }
    dropped = [e for e in source.store.read(forked) if isinstance(e.body, TaskDropped)]
    assert [(e.body.reason, e.body.cause, e.conversation_id) for e in dropped] == [
        (NOBODY_WAITS, "fork", helper)
    ]
    assert not any(
        e.conversation_id == helper and isinstance(e.body, TaskStarted)
        for e in source.store.read(forked)
        if e.seq > send.seq
    )


def test_a_continuation_cut_from_its_answer_answers_as_it_would_have(source: Source) -> None:
    continuations = {
        e.body.plan.task_id
        for e in source.events
        if isinstance(e.body, TaskEnqueued) and e.body.plan.closure is not None
    }
    started = next(
        e for e in source.events if isinstance(e.body, TaskStarted) and e.task_id in continuations
    )
    recorded = source.events[started.seq]  # the answer, in the same group
    assert isinstance(recorded.body, ToolCallCompleted)
    forked, _ = go_on(source, started.seq, "cut-continuation")
    # The answer the continuation recorded, said to be the fork's.
    answer = msgspec.structs.replace(recorded.body, aborted_by="fork")
    assert _answer(source, forked, recorded.body.call_id) == answer
    crashed = [e for e in source.store.read(forked) if isinstance(e.body, TurnAborted)]
    assert crashed[-1].task_id == started.task_id and crashed[-1].body.reason == "crashed"


def test_a_conv_create_cut_before_it_replaced_its_task_names_the_conversation_it_opened(
    source: Source,
) -> None:
    opened = [e for e in source.events if isinstance(e.body, ConversationOpened)][1]
    replaced = next(e for e in source.events if isinstance(e.body, TurnAborted))
    assert isinstance(replaced.body, TurnAborted)
    forked, _ = go_on(source, opened.seq, "cut-create-call")
    answer = _answer(source, forked, replaced.body.awaiting_call_ids[0])
    assert (answer.outcome, answer.aborted_by) == ("error", "crash")
    output = json.loads(str(answer.output))
    assert (output["conversation_id"], output["error"]) == (opened.conversation_id, HANDOFF_CUT)
