"""The runtime end to end: real actors, a real HTTP model server, the real openai SDK."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from pathlib import Path

from scripted import assert_histories_valid, call, kinds, runtime_for

from plait.events import (
    AgentMessageDelta,
    Event,
    ModelRequestFailed,
    SessionClosed,
    SqliteStore,
    TaskCompleted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def test_a_task_streams_records_and_completes(server: ScriptedModelServer, tmp_path: Path) -> None:
    server.push(Step(text="Hello from the model."))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session(base_instructions="Be brief.")
        with session.subscribe() as feed:
            outcome = session.run("hi", timeout=30)
            deltas = []
            while (item := feed.get(timeout=0)) is not None:
                if isinstance(item, AgentMessageDelta):
                    deltas.append(item.text)
        assert outcome.ok and outcome.last_assistant_message == "Hello from the model."
        assert "".join(deltas) == "Hello from the model."
        events = runtime.store.read(session.session_id)
        assert kinds(events, session.root_conversation_id) == [
            "ConversationOpened",
            "TaskEnqueued",
            "TaskStarted",
            "TurnStarted",
            "ModelRequested",
            "ModelResponded",
            "TokensCounted",
            "TaskCompleted",
        ]
        (request,) = server.requests
        assert request.messages == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ]
        assert [t["function"]["name"] for t in request.tools or []][:2] == [
            "conv_create",
            "conv_send",
        ]
        assert session.history() == [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello from the model."},
        ]


def test_conv_create_replaces_the_task_and_continues_with_the_answer(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(
            text="Asking a helper.",
            tool_calls=[call("conv_create", user_instruction="Count to 3.")],
        ),
        Step(text="1 2 3"),
        Step(text="The helper counted: 1 2 3"),
    )
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("Get a helper to count.", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "The helper counted: 1 2 3"
        events = runtime.store.read(session.session_id)
        root = session.root_conversation_id
        helper = next(c.id for c in session.conversations() if c.id != root)
        sequence = [(type(e.body).__name__, e.conversation_id) for e in events]
        aborted = sequence.index(("TurnAborted", root))
        helper_started = sequence.index(("TaskStarted", helper))
        helper_done = sequence.index(("TaskCompleted", helper))
        continued = [i for i, s in enumerate(sequence) if s == ("TaskStarted", root)][1]
        assert aborted < helper_started < helper_done < continued
        replaced = events[aborted].body
        assert isinstance(replaced, TurnAborted) and replaced.reason == "replaced"
        answer = next(e.body for e in events[continued:] if isinstance(e.body, ToolCallCompleted))
        assert json.loads(str(answer.output)) == {
            "conversation_id": helper,
            "first_user_message": "Count to 3.",
            "first_items_count": 1,
            "last_assistant_message": "1 2 3",
        }
        helper_request, continuation_request = server.requests[1], server.requests[2]
        assert helper_request.messages[1:] == [{"role": "user", "content": "Count to 3."}]
        assert continuation_request.messages[-1]["role"] == "tool"
        assert_histories_valid(events)


def test_conv_list_history_and_destroy_do_not_interrupt(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="Say hi.")]),
        Step(text="hi"),
        Step(tool_calls=[call("conv_list")]),
        Step(text="listed"),
    )
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("make a helper", timeout=30).ok
        root = session.root_conversation_id
        helper = next(c.id for c in session.conversations() if c.id != root)
        server.push(
            Step(
                tool_calls=[
                    call("conv_history", conversation_id=helper),
                    call("conv_destroy", conversation_id=root),
                    call("conv_destroy", conversation_id="nope"),
                    call("conv_destroy", conversation_id=helper),
                ]
            ),
            Step(text="done"),
        )
        assert session.run("inspect", timeout=30).ok
        events = runtime.store.read(session.session_id)
        outputs = [
            json.loads(str(e.body.output)) for e in events if isinstance(e.body, ToolCallCompleted)
        ]
        listed = outputs[1]["conversations"]
        assert [c["id"] for c in listed] == [root, helper]
        assert all(c["last_active_at"].endswith("Z") for c in listed)
        assert outputs[2] == {
            "entries": [{"role": "user", "text": "Say hi."}, {"role": "assistant", "text": "hi"}]
        }
        assert outputs[3] == {"ok": False, "reason": "the root conversation cannot be destroyed"}
        assert outputs[4] == {"ok": False, "reason": "conversation not found"}
        assert outputs[5] == {"ok": True}
        assert [c.id for c in session.conversations()] == [root]
        assert [type(e.body).__name__ for e in events].count("TurnAborted") == 1  # only conv_create
        assert_histories_valid(events)


def test_interrupt_mid_stream_closes_the_stream_and_aborts(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(text="word " * 400, chunk_chars=5, chunk_delay=0.01))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        with session.subscribe() as feed:
            task = session.submit("talk a lot")
            while not isinstance(feed.get(timeout=10), AgentMessageDelta):
                pass
            session.interrupt()
            while True:
                item = feed.get(timeout=10)
                assert item is not None, "no TurnAborted after the interrupt"
                if isinstance(item, Event) and isinstance(item.body, TurnAborted):
                    break
        assert item.task_id == task and item.body.reason == "interrupted"
        assert item.body.cause == "user"
        server.wait_for_disconnects(1, timeout=10)
        events = runtime.store.read(session.session_id)
        assert not any(isinstance(e.body, TaskCompleted) for e in events)


def test_model_errors_end_the_task_with_a_reason(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(status=500), Step(status=401, error_message="bad key"))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        outcome = session.run("hi", timeout=30)
        assert (outcome.status, outcome.error_kind) == ("model_error", "auth")
        assert "401" in outcome.detail and "bad key" in outcome.detail
        events = runtime.store.read(session.session_id)
        failures = [e.body for e in events if isinstance(e.body, ModelRequestFailed)]
        assert [(f.attempt, f.status) for f in failures] == [(1, 500), (2, 401)]
        (aborted,) = [e.body for e in events if isinstance(e.body, TurnAborted)]
        assert (aborted.reason, aborted.model_error) == ("failed", "auth")


def test_interrupt_chains_stop_at_the_depth_limit(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="go deeper")]),
        Step(tool_calls=[call("conv_create", user_instruction="deeper still")]),
        Step(text="could not go deeper"),
        Step(text="root done"),
    )
    with runtime_for(server, tmp_path, max_interrupt_chain_depth=1) as runtime:
        session = runtime.start_session()
        outcome = session.run("nest", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "root done"
        refused = server.requests[2].messages[-1]
        assert refused["role"] == "tool" and "depth limit 1" in refused["content"]
        assert len(session.conversations()) == 2


def test_a_closed_session_resumes_with_its_history(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(text="first answer"), Step(text="second answer"))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("one", timeout=30).ok
        session_id = session.session_id
    with runtime_for(server, tmp_path) as runtime:
        resumed = runtime.resume(session_id)
        assert resumed.run("two", timeout=30).last_assistant_message == "second answer"
        assert [m["content"] for m in server.requests[1].messages[1:]] == [
            "one",
            "first answer",
            "two",
        ]


def unblock(fifo: Path) -> None:
    """Let a thread stuck opening ``fifo`` finish (if it is there to read)."""
    with contextlib.suppress(OSError):
        writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(writer, b"be brief")
        os.close(writer)


def stuck_reading(fifo: Path, timeout: float = 30.0) -> int:
    """Wait until a thread has ``fifo`` open to read; return a writer that keeps it waiting in
    its read until the writer is closed."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: nobody has it open to read yet
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            pause.wait(0.01)


def test_a_task_that_does_not_stop_is_force_aborted_at_close(tmp_path: Path) -> None:
    fifo = tmp_path / "instructions.fifo"
    os.mkfifo(fifo)  # reading it blocks until someone writes: a conversation stuck in I/O
    script = [
        Step(
            tool_calls=[call("conv_create", user_instruction="go", base_instruction_file=fifo.name)]
        )
    ]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        session.submit("delegate")
        writer = stuck_reading(fifo)  # what it made of the reply is not written: none hears it
        try:
            session.close(timeout=0.5)
            session.close(timeout=0.5)  # closing twice is harmless
        finally:
            os.write(writer, b"be brief")
            os.close(writer)
        events = runtime.store.read(session.session_id)
    with SqliteStore(tmp_path / "plait.db") as store:
        try:  # the replayed program gets stuck the same way; the close is fed in
            result = replay(store, session.session_id, timeout=5)
        finally:
            unblock(fifo)
    assert result.ok, result.divergence and result.divergence.message()
    root = events[1].conversation_id or ""
    assert kinds(events, root)[-3:] == ["ToolCallRequested", "ToolCallCompleted", "TurnAborted"]
    aborted = events[-2].body
    assert isinstance(aborted, TurnAborted) and aborted.reason == "interrupted"
    assert aborted.cause == "forced_close"
    assert aborted.detail == "force-aborted: the task did not stop within 0.5 s of the close"
    answer = events[-3].body
    assert isinstance(answer, ToolCallCompleted) and answer.aborted_by == "forced_close"
    assert isinstance(events[-1].body, SessionClosed)
    assert sum(isinstance(e.body, SessionClosed) for e in events) == 1
    assert_histories_valid(events)
