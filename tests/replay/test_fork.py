"""A fork copies a session up to a seq and goes on live; the source is untouched."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from scripted import assert_histories_valid, call, runtime_for, went_on_problems

from plait import PlaitError
from plait.actors import ModelSettings
from plait.events import SessionStarted, TaskCompleted, TurnAborted
from plait.events.stores import SqliteStore
from plait.replay import fork, replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step


def test_a_fork_goes_its_own_way_and_replays(tmp_path: Path) -> None:
    ids = itertools.count(1)
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="help")]),
        Step(text="helped"),
        Step(text="first answer"),
        Step(text="the source's second answer"),
        Step(text="the fork's second answer"),
    ]
    with ScriptedModelServer(script) as server, SqliteStore(tmp_path / "f.db") as store:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        with Runtime(
            store, RuntimeSettings(model=settings, new_id=lambda: f"id-{next(ids)}")
        ) as runtime:
            source = runtime.start_session()
            assert source.run("one", timeout=60).ok
            cut = store.last_seq(source.session_id)
            assert source.run("two", timeout=60).ok
            source.close()
            before = store.read(source.session_id)

            forked = fork(store, source.session_id, cut, new_session_id="the-fork")
            session = runtime.resume(forked)
            outcome = session.run("two, differently", timeout=60)
            history = session.history()
            session.close()
        assert outcome.last_assistant_message == "the fork's second answer"
        assert store.read(source.session_id) == before  # the source is untouched
        events = store.read(forked)
        first = events[0].body
        assert isinstance(first, SessionStarted) and first.forked_from is not None
        assert (first.forked_from.stream, first.forked_from.at_seq) == (source.session_id, cut)
        assert [e.body for e in events[1:cut]] == [e.body for e in before[1:cut]]
        assert history[-1] == {"role": "assistant", "content": "the fork's second answer"}
        assert "the source's second answer" not in str(history)
        assert store.verify(forked).ok
        assert_histories_valid(events)
        result = replay(store, forked, timeout=5)
        assert result.ok, result.divergence and result.divergence.message()


def test_a_fork_inside_a_task_ends_it_on_resume(tmp_path: Path) -> None:
    ids = itertools.count(1)
    with (
        ScriptedModelServer([Step(text="done"), Step(text="again")]) as server,
        SqliteStore(tmp_path / "f.db") as store,
    ):
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        with Runtime(
            store, RuntimeSettings(model=settings, new_id=lambda: f"id-{next(ids)}")
        ) as runtime:
            source = runtime.start_session()
            assert source.run("one", timeout=60).ok
            events = store.read(source.session_id)
            mid = next(e.seq for e in events if isinstance(e.body, TaskCompleted)) - 1
            session = runtime.resume(fork(store, source.session_id, mid))
            assert session.run("again", timeout=60).ok
            forked = store.read(session.session_id)
        aborted = [e.body for e in forked if isinstance(e.body, TurnAborted)]
        assert [a.reason for a in aborted] == ["crashed"]
        assert_histories_valid(forked)
        with pytest.raises(PlaitError, match="cannot fork at seq 99"):
            fork(store, source.session_id, 99)


GOLDEN = Path(__file__).with_name("golden")


@pytest.mark.parametrize(
    ("recorded", "session"),
    [
        ("v1-sessions", "g1-1"),  # nested conv_create, conv_send: before settings were kept
        ("v3-sessions", "g6-1"),  # a crash and a takeover, then a close that interrupts
    ],
)
def test_a_session_recorded_long_ago_forks_at_every_seq_and_goes_on(
    tmp_path: Path, recorded: str, session: str
) -> None:
    copy = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{recorded}.sqlite", copy)  # the committed file stays untouched
    with (
        ScriptedModelServer() as server,
        SqliteStore(copy) as store,
        runtime_for(server, tmp_path, store=store, expire_every_sec=None) as runtime,
    ):
        failures: dict[int, list[str]] = {}
        for at in range(2, store.last_seq(session) + 1):
            before = len(server.requests)
            server.push(*[Step(text="Went on.")] * 4)  # what waited, then the input
            forked = runtime.resume(fork(store, session, at, new_session_id=f"cut-{at}"))
            assert forked.run("Go on.", timeout=60).last_assistant_message == "Went on."
            forked.close()
            problems = went_on_problems(store, f"cut-{at}", server.requests[before:])
            if problems:
                failures[at] = problems
        assert failures == {}
        assert replay(store, session, timeout=5).ok  # the source replays as it ran
