"""What protects an embedding service: bounded feeds, and clear errors for what does not exist."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from scripted import runtime_for

from plait import (
    FeedLagged,
    SessionClosedError,
    UnknownConversationError,
    UnknownSessionError,
)
from plait.actors import Enqueue
from plait.events import AgentMessageDelta, Event, InputText, TaskCompleted, TaskPlan
from plait.runtime import await_outcome
from plait.testing import ScriptedModelServer, Step


def test_a_reader_that_falls_behind_is_told_where_to_read_the_log_from(tmp_path: Path) -> None:
    # 60 deltas for a feed that holds 10: it lags instead of growing.
    steps = [Step(text="w" * 60, chunk_chars=1), Step(text="second")]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        with session.subscribe(limit=10) as slow:
            assert session.run("first", timeout=30).ok  # the slow feed is not read meanwhile
            held = [slow.get(timeout=0) for _ in range(11)]
            assert all(item is not None for item in held)
            lagged = held[-1]
            assert isinstance(lagged, FeedLagged)
            assert slow.get(timeout=0) is None  # nothing more was held
            log = runtime.store.read(session.session_id)
            shown = [item for item in held[:-1] if isinstance(item, Event)]
            assert lagged.session_id == session.session_id
            assert lagged.after_seq == (shown[-1].seq if shown else log[1].seq)
            missed = slow.catch_up(lagged)
            assert [e.seq for e in missed] == [e.seq for e in log if e.seq > lagged.after_seq]
            assert isinstance(missed[-1].body, TaskCompleted)
            # Once taken, the feed holds what is recorded from then on, each event once.
            assert session.run("again", timeout=30).ok
            later: list[Event] = []
            while (item := slow.get(timeout=0)) is not None:
                if isinstance(item, Event):
                    later.append(item)
            after = [e for e in runtime.store.read(session.session_id) if e.seq > missed[-1].seq]
            assert [e.seq for e in later] == [e.seq for e in after]


def test_waiting_for_an_outcome_survives_a_lagged_feed(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="done " * 20, chunk_chars=2)]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with session.subscribe(limit=3) as feed:
            task = session.run("go", timeout=30).task_id  # ends before anyone reads feed
            outcome = await_outcome(feed, task, timeout=10)
        assert outcome.ok and outcome.last_assistant_message == "done " * 20


async def test_an_async_reader_that_lags_catches_up_from_the_log(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="x" * 40, chunk_chars=1)]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        async with session.subscribe(limit=5) as feed:
            outcome = await session.arun("go", timeout=30)
            seen: list[Event] = []
            while (item := await feed.aget(timeout=0)) is not None:
                if isinstance(item, FeedLagged):
                    seen += await asyncio.to_thread(feed.catch_up, item)
                elif isinstance(item, Event):
                    seen.append(item)
        log = runtime.store.read(session.session_id)
        assert [e.seq for e in seen] == [e.seq for e in log if e.seq > log[1].seq]
        assert outcome.ok


async def test_a_cancelled_wait_leaves_nothing_that_breaks_the_session(tmp_path: Path) -> None:
    steps = [Step(text="one"), Step(text="two")]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        feed = session.subscribe()

        def wait_on_a_loop_that_then_closes() -> None:
            async def cancelled() -> None:
                waiting = asyncio.create_task(feed.aget())
                await asyncio.sleep(0)  # let it start waiting
                waiting.cancel()

            asyncio.run(cancelled())

        await asyncio.to_thread(wait_on_a_loop_that_then_closes)
        # The feed is still subscribed, its waiter's loop gone: recording goes on.
        assert (await session.arun("a", timeout=30)).ok
        assert (await session.arun("b", timeout=30)).last_assistant_message == "two"
        feed.close()
        assert feed.closed and feed.get(timeout=0) is None


def test_a_task_for_a_conversation_the_session_lacks_is_refused(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="fine")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with pytest.raises(UnknownConversationError) as refused:
            session.submit("hello", conversation_id="nope")
        assert refused.value.conversation_id == "nope"
        assert str(refused.value) == f"session {session.session_id}: no conversation nope"
        assert session.run("still works", timeout=30).last_assistant_message == "fine"


def test_a_queued_task_whose_conversation_is_gone_fails_and_the_queue_moves_on(
    tmp_path: Path,
) -> None:
    # As when the conversation is destroyed between the check and the queueing.
    with (
        ScriptedModelServer([Step(text="next")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            orphan = TaskPlan("t-orphan", "gone", [InputText("hello")])
            actor = runtime.sessions.hosts[session.session_id].actor
            assert actor is not None
            actor.tell(Enqueue((orphan,)))  # past the check, as a race would
            failed = await_outcome(feed, "t-orphan", timeout=10)
        assert failed.status == "failed"
        assert failed.detail == f"no conversation gone in session {session.session_id}"
        assert session.run("after", timeout=30).last_assistant_message == "next"


def test_unknown_and_closed_sessions_raise_errors_that_say_which(tmp_path: Path) -> None:
    with ScriptedModelServer([]) as server, runtime_for(server, tmp_path) as runtime:
        with pytest.raises(UnknownSessionError) as unknown:
            runtime.resume("no-such-session")
        assert unknown.value.session_id == "no-such-session"
        assert isinstance(unknown.value, LookupError)
        session = runtime.start_session()
        session.close()
        with pytest.raises(SessionClosedError) as closed:
            session.submit("late")
        assert closed.value.session_id == session.session_id


def test_deltas_reach_a_feed_that_keeps_up_in_full(tmp_path: Path) -> None:
    with (
        ScriptedModelServer([Step(text="y" * 50, chunk_chars=1)]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        with session.subscribe(limit=1000) as feed:
            assert session.run("go", timeout=30).ok
            items = []
            while (item := feed.get(timeout=0)) is not None:
                items.append(item)
        deltas = [i.text for i in items if isinstance(i, AgentMessageDelta)]
        assert "".join(deltas) == "y" * 50
        assert not any(isinstance(i, FeedLagged) for i in items)


def test_a_feed_that_lags_twice_hands_out_each_event_once() -> None:
    from plait.actors import Journal
    from plait.events import MemoryStore, SessionClosed

    journal = Journal(MemoryStore(), "s")
    feed = journal.feed(limit=2)
    assert feed.after_seq == 0
    seen: list[int] = []
    for _ in range(3):
        journal.record([SessionClosed("one at a time")])
    first = [feed.get(timeout=0) for _ in range(3)]
    seen += [e.seq for e in first if isinstance(e, Event)]
    assert isinstance(first[-1], FeedLagged) and first[-1].after_seq == 2
    for _ in range(3):
        journal.record([SessionClosed("more")])
    seen += [e.seq for e in feed.catch_up(first[-1])]
    while (item := feed.get(timeout=0)) is not None:
        if isinstance(item, FeedLagged):
            seen += [e.seq for e in feed.catch_up(item)]
        elif isinstance(item, Event):
            seen.append(item.seq)
    assert seen == [1, 2, 3, 4, 5, 6]
