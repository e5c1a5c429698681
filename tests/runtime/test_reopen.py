"""``Runtime.resume`` of a closed session reopens it, and its log says so."""

from __future__ import annotations

from pathlib import Path

from scripted import runtime_for

from plait.events import SessionClosed, SessionReopened
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def test_a_closed_session_resumed_is_reopened_in_its_log_and_replays(tmp_path: Path) -> None:
    script = [Step(text="before"), Step(text="after")]
    with ScriptedModelServer(script) as server:
        with runtime_for(server, tmp_path) as runtime:
            session = runtime.start_session()
            assert session.run("one", timeout=30).last_assistant_message == "before"
            session.close()
            assert session.state == "closed"
            closed_at = runtime.store.last_seq(session.session_id)
        with runtime_for(server, tmp_path) as runtime:
            again = runtime.resume(session.session_id)
            assert again.state == "active" and not again.closed
            assert again.run("two", timeout=30).last_assistant_message == "after"
            events = runtime.store.read(again.session_id)
            history = [m["content"] for m in again.history()]
            result = replay(runtime.store, again.session_id, timeout=10)
    closed, reopened = events[closed_at - 1], events[closed_at]
    assert isinstance(closed.body, SessionClosed)
    assert reopened.body == SessionReopened(closed_seq=closed_at)
    assert history == ["one", "before", "two", "after"]
    assert result.ok, result.divergence and result.divergence.message()


def test_resuming_an_open_session_records_no_reopening(tmp_path: Path) -> None:
    with ScriptedModelServer([Step(text="hi")]) as server:
        with runtime_for(server, tmp_path) as runtime:
            session = runtime.start_session()
            assert session.run("one", timeout=30).ok
            session.runtime.sessions.hosts[session.session_id].crash(timeout=5)  # left open
        with runtime_for(server, tmp_path) as runtime:
            runtime.resume(session.session_id)
            events = runtime.store.read(session.session_id)
    assert not any(isinstance(e.body, SessionReopened) for e in events)
