"""Stopping on purpose in the API (docs/processes.md#stopping): ``Runtime.close(grace_sec=)``
and ``Runtime.drain(grace_sec=)`` give the running task its grace period, cut it with the
cause ``shutdown``, and hand the session back with its lease released at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripted import call, local_mcp_servers, replayed, runtime_for
from support import wait_for_event

from plait.events import (
    CANCEL_MESSAGE,
    INTERRUPT_MESSAGE,
    AgentMessageDelta,
    Event,
    ModelRequested,
    ModelResponded,
    SessionClosed,
    StopRequested,
    TaskCompleted,
    TokensCounted,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.projections import HistoryProjection
from plait.testing import ScriptedModelServer, Step

SLOW = Step(text="slow " * 400, chunk_chars=5, chunk_delay=0.1)
"""A reply that takes 40 s."""


def test_close_with_a_grace_period_cuts_the_reply_and_another_runtime_goes_on_at_once(
    tmp_path: Path,
) -> None:
    with ScriptedModelServer([SLOW, Step(text="Going on.")]) as server:
        first = runtime_for(server, tmp_path, lease_sec=60.0)  # a lapse would take a minute
        session = first.start_session()
        task = session.submit("Take your time.")
        wait_for_event(first.store, session.session_id, ModelRequested)
        first.close(grace_sec=0.2)
        with runtime_for(server, tmp_path, lease_sec=60.0) as second:
            again = second.resume(session.session_id)
            assert not again.followed  # the lease was released, not left to lapse
            assert again.run("And now?", timeout=30).last_assistant_message == "Going on."
    events = replayed(tmp_path, session.session_id)
    (cut,) = [e for e in events if isinstance(e.body, TurnAborted)]
    assert (cut.task_id, cut.body.reason, cut.body.cause) == (task, "interrupted", "shutdown")
    assert cut.body.detail == "the process stopped"
    closed = [e.seq for e in events if isinstance(e.body, SessionClosed)]
    assert closed == [events[-1].seq]  # the second runtime's close: the first handed it back


def test_a_task_that_ends_within_the_grace_period_ends_as_it_would_have(tmp_path: Path) -> None:
    script = [Step(text="quick " * 10, chunk_chars=6, chunk_delay=0.05)]
    with ScriptedModelServer(script) as server:
        runtime = runtime_for(server, tmp_path)
        session = runtime.start_session()
        task = session.submit("Be quick.")
        wait_for_event(runtime.store, session.session_id, ModelRequested)
        runtime.drain(grace_sec=30)
        runtime.close()
        with runtime_for(server, tmp_path) as other:
            lease = other.store.leases.get(session.session_id)
        assert lease is not None and lease.owner is None  # nothing waits: free
    events = replayed(tmp_path, session.session_id)
    ended = [e for e in events if e.task_id == task and isinstance(e.body, TaskCompleted)]
    assert len(ended) == 1 and not any(isinstance(e.body, TurnAborted) for e in events)


# --- the next checkpoint (docs/interrupts.md#stopping-at-a-checkpoint) ---------------------------

GRACE_SEC = 5.0
"""The default ``--grace-sec``: what each stop below is given."""


def _stopped_at_checkpoint(
    tmp_path: Path, server: ScriptedModelServer, wait_for: type[Any], grace_sec: float
) -> str:
    """Submit a task in a session with the test MCP server, stop the runtime with
    ``grace_sec`` once ``wait_for`` happens (an event, or the first text delta), and return
    the session."""
    runtime = runtime_for(server, tmp_path, mcp_servers=local_mcp_servers())
    session = runtime.start_session()
    with session.subscribe() as feed:
        session.submit("Look it up.")
        while (item := feed.get(timeout=30)) is not None:
            if isinstance(item.body if isinstance(item, Event) else item, wait_for):
                break
        assert item is not None, f"no {wait_for.__name__} within 30 s"
    runtime.close(grace_sec=grace_sec)
    return session.session_id


def _ended(events: list[Event]) -> TurnAborted:
    (cut,) = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert (cut.reason, cut.cause, cut.detail) == ("interrupted", "shutdown", "the process stopped")
    return cut


def _goes_on(server: ScriptedModelServer, tmp_path: Path, session_id: str) -> None:
    """The next process resumes the session at once and runs its next task."""
    with runtime_for(server, tmp_path, mcp_servers=local_mcp_servers()) as again:
        resumed = again.resume(session_id)
        assert not resumed.followed
        assert resumed.run("And now?", timeout=30).last_assistant_message == "Going on."


def test_a_stop_mid_reply_records_the_reply_and_ends_before_its_calls(tmp_path: Path) -> None:
    # A reply that streams for about a second and asks for a tool; the script would go on.
    reply = Step(
        text="Let me look. " * 20,
        chunk_chars=13,
        chunk_delay=0.05,
        tool_calls=[call("t__echo", text="hi")],
    )
    # The step the task would have asked for next answers the next process's task instead.
    with ScriptedModelServer([reply, Step(text="Going on.")]) as server:
        # The whole reply and checkpoint 1, below: the reply ended, and the task with it; a
        # cut at the grace would have been checkpoint 0 with part of the reply.
        session = _stopped_at_checkpoint(tmp_path, server, AgentMessageDelta, GRACE_SEC)
        assert len(server.requests) == 1  # no second model request
        events = replayed(tmp_path, session)
        kinds = [type(e.body) for e in events]
        assert kinds.index(StopRequested) < kinds.index(ModelResponded)  # asked mid-reply
        assert ToolCallStarted not in kinds and ToolCallCompleted not in kinds  # not run
        responded = next(e.body for e in events if isinstance(e.body, ModelResponded))
        assert responded.text == "Let me look. " * 20  # the whole reply is kept
        assert _ended(events).checkpoint == 1  # the call answered as cancelled
        history = HistoryProjection().fold(events).conversations[events[1].conversation_id or ""]
        assert [m.content for m in history.messages[-2:]] == [CANCEL_MESSAGE, INTERRUPT_MESSAGE]
        _goes_on(server, tmp_path, session)


def test_a_stop_lets_a_running_call_end_and_starts_no_request(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("t__slow", seconds=1)]), Step(text="Going on.")]
    with ScriptedModelServer(script) as server:
        # The call's own output and checkpoint 2, below: it ran to its end, not cut at the grace.
        session = _stopped_at_checkpoint(tmp_path, server, ToolCallStarted, GRACE_SEC)
        assert len(server.requests) == 1
        events = replayed(tmp_path, session)
        (done,) = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
        assert (done.outcome, done.output) == ("ok", "slept 1.0s")  # it ran to its end
        assert _ended(events).checkpoint == 2  # every call answered, no request out
        assert not any(isinstance(e.body, TokensCounted) and e.body.estimated for e in events)
        _goes_on(server, tmp_path, session)


def test_a_call_that_does_not_end_within_the_grace_is_cut(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("t__slow", seconds=60)]), Step(text="Going on.")]
    with ScriptedModelServer(script) as server:
        session = _stopped_at_checkpoint(tmp_path, server, ToolCallStarted, 0.5)
        assert len(server.requests) == 1
        events = replayed(tmp_path, session)
        kinds = [type(e.body) for e in events]
        assert kinds.index(StopRequested) < kinds.index(TurnAborted)
        assert _ended(events).checkpoint == 4  # the call cancelled where it ran
        assert ToolCallCompleted not in kinds  # the cut itself answers it
        _goes_on(server, tmp_path, session)
