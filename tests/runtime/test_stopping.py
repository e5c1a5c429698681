"""Stopping on purpose in the API (docs/processes.md#stopping): ``Runtime.close(grace_sec=)``
and ``Runtime.drain(grace_sec=)`` give the running task its grace period, cut it with the
cause ``shutdown``, and hand the session back with its lease released at once."""

from __future__ import annotations

from pathlib import Path

from scripted import replayed, runtime_for
from support import wait_for_event

from plait.events import ModelRequested, SessionClosed, TaskCompleted, TurnAborted
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
            lease = other.store.lease(session.session_id)
        assert lease is not None and lease.owner is None  # nothing waits: free
    events = replayed(tmp_path, session.session_id)
    ended = [e for e in events if e.task_id == task and isinstance(e.body, TaskCompleted)]
    assert len(ended) == 1 and not any(isinstance(e.body, TurnAborted) for e in events)
