"""Two runtimes on one store, as two processes sharing it: ownership, the inbox, fencing and
takeover (docs/processes.md). Each runtime has its own owner id, store connection and threads;
``test_processes.py`` does the same with real processes and signals."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import POSTGRES_URL, StoreFactory, process
from support import wait_for_event as wait_for

from plait._errors import LeaseLostError
from plait.events import (
    Command,
    Event,
    EventStore,
    InputText,
    ModelRequested,
    SessionClosed,
    SessionResumed,
    SubmitTask,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TurnAborted,
)
from plait.events._packing import pack
from plait.events.stores import PostgresStore
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

WAIT_SEC = 30.0
SLOW = Step(text="slow " * 40, chunk_chars=5, chunk_delay=0.05)
"""A reply that streams for about 2 s: long enough to act while it does."""


@contextlib.contextmanager
def two(stores: StoreFactory, server: ScriptedModelServer) -> Iterator[tuple[Runtime, Runtime]]:
    """Processes ``a`` and ``b`` on one store."""
    with process(stores, server, "a") as a, process(stores, server, "b") as b:
        yield a, b


def bodies(store: EventStore, stream: str, kind: type) -> list[Any]:
    return [e for e in store.read(stream) if isinstance(e.body, kind)]


def test_a_task_submitted_by_another_process_runs_on_the_owner(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="one"), Step(text="two"))
    with two(durable_stores, server) as (a, b):
        owned = a.start_session()
        assert owned.run("first", timeout=30).ok
        followed = b.resume(owned.session_id)
        assert followed.followed and not owned.followed
        outcome = followed.run("second", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "two"
        assert owned.history()[-1] == {"role": "assistant", "content": "two"}
        assert followed.history() == owned.history()  # folded from the log
        store = a.store
        assert len(bodies(store, owned.session_id, TaskEnqueued)) == 2
        assert store.inbox.commands() == []  # taken, and dropped once durable
        assert store.verify(owned.session_id).ok


def test_recover_leaves_a_live_session_alone(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(SLOW)
    with two(durable_stores, server) as (a, b):
        session = a.start_session()
        task_id = session.submit("work")
        wait_for(a.store, session.session_id, ModelRequested)
        assert b.recover() == []  # a's lease is live: its running task is not b's to end
        assert b.resume(session.session_id).followed
        ended = wait_for(a.store, session.session_id, TaskCompleted, timeout=60)
        assert ended.task_id == task_id
        assert bodies(a.store, session.session_id, TurnAborted) == []
        assert bodies(a.store, session.session_id, SessionResumed) == []


def test_a_former_owner_cannot_append_and_its_waiters_are_told(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(SLOW, Step(text="b answers"))
    with two(durable_stores, server) as (a, b):
        session = a.start_session()
        sid = session.session_id
        task_id = session.submit("work")
        wait_for(a.store, sid, ModelRequested)
        # a stalls (as a paused process would): its lease lapses, b takes the session over.
        lease = a.store.leases.get(sid)
        assert lease is not None
        a.store.leases.release(sid, "a", lease.epoch, idle=False)
        taken = b.resume(sid)
        assert not taken.followed
        with pytest.raises(LeaseLostError, match=f"session {sid}: this process no longer owns"):
            session.run("more", timeout=30)  # its TaskEnqueued is refused
        with pytest.raises(LeaseLostError):
            session.submit("still there?")
        outcome = taken.run("are you there?", timeout=30)
        assert outcome.ok and outcome.last_assistant_message == "b answers"
        events = a.store.read(sid)
        resumed = next(e.seq for e in events if isinstance(e.body, SessionResumed))
        aborted = [e for e in events if isinstance(e.body, TurnAborted)]
        assert [(e.task_id, e.body.reason) for e in aborted] == [(task_id, "crashed")]
        assert all(e.seq > resumed for e in aborted)
        assert a.store.verify(sid).ok


def test_a_followed_session_is_taken_over_when_its_owner_hands_it_back(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="from a"), Step(text="from b"))
    with two(durable_stores, server) as (a, b):
        session = a.start_session()
        assert session.run("hello", timeout=30).ok
        followed = b.resume(session.session_id)
        assert followed.followed
        assert session.release(timeout=30)  # a hands it back, with nothing waiting
        outcome = followed.run("and now?", timeout=30)  # b takes it over to run this
        assert outcome.ok and outcome.last_assistant_message == "from b"
        assert not followed.followed
        lease = b.store.leases.get(session.session_id)
        assert lease is not None and lease.owner == "b" and lease.epoch == 2


def test_a_follower_misses_no_event_committed_below_where_it_began(
    tmp_path: Path, server: ScriptedModelServer
) -> None:
    """On PostgreSQL an append begun before another may commit after it, below its position
    (docs/event-log.md#streams-seq-and-position): a follower that begins after the later one
    still gets the earlier one once it commits."""
    stores = StoreFactory("postgres", tmp_path)
    server.push(Step(text="x"), Step(text="y"), Step(text="x again"))
    try:
        with two(stores, server) as (a, b):
            x, y = a.start_session(), a.start_session()
            assert x.run("hi", timeout=30).ok and y.run("hi", timeout=30).ok
            assert y.release(timeout=30)  # a writes no more to y: the test's append is its
            store = stores.open()
            assert isinstance(store, PostgresStore)
            (last,) = store.read(y.session_id)[-1:]
            prepared = store.prepare(y.session_id, [SessionClosed()], last.seq, last.hash)
            ((seq, _, _, data, digest),) = prepared.rows
            row = pack(seq, last.hash, [data], digest)
            args = (y.session_id, last.seq, last.hash, None, 1, row.hash, row.data, [], [], [])
            with psycopg.connect(POSTGRES_URL) as held:  # y's append, begun first, left open
                held.execute(store._calls.sql["append"], args)
                assert x.run("again", timeout=30).ok  # x's, begun later, committed first
                b.follow(x.session_id)  # b begins after x's last event
                followed = b.follow(y.session_id)
                with followed.subscribe(transient=False) as feed:
                    held.commit()
                    got = feed.get(timeout=10)
        assert got is not None and isinstance(got, Event) and got.seq == last.seq + 1
    finally:
        stores.close()


def test_commands_of_a_task_already_in_the_log_are_not_run_twice(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="once"))
    with process(durable_stores, server, "a") as a:
        session = a.start_session()
        sid, root = session.session_id, session.root_conversation_id
        plan = TaskPlan("task-1", root, [InputText("hi")])
        assert session.runtime.sessions.hosts[sid].queue(plan) == "task-1"
        wait_for(a.store, sid, TaskCompleted)
        # the process dies before it dropped the command
        session.runtime.sessions.hosts[session.session_id].crash(timeout=5)
    store = durable_stores.open()
    store.inbox.put(sid, Command(SubmitTask(plan), sender="a"))
    with process(durable_stores, server, "b") as b:
        b.resume(sid)
        assert store.inbox.commands(sid) == []
    assert len(bodies(store, sid, TaskEnqueued)) == 1


def test_an_idle_owner_learns_at_its_heartbeat_that_it_lost_the_session(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    with two(durable_stores, server) as (a, b):
        session = a.start_session()
        with session.subscribe() as feed:
            lease = a.store.leases.get(session.session_id)
            assert lease is not None
            a.store.leases.release(session.session_id, "a", lease.epoch, idle=False)
            assert not b.resume(session.session_id).followed
            with pytest.raises(LeaseLostError, match="not renewed in time"):
                feed.get(timeout=30)  # woken by a's next heartbeat (every lease_sec / 3)
        assert session.closed and not a.owner.holds(session.session_id)


def test_a_front_end_submits_and_a_worker_adopts_the_session_to_run_it(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(Step(text="hello"), Step(text="from the worker"))
    with process(durable_stores, server, "front") as front:
        started = front.start_session()
        assert started.run("hi", timeout=30).ok
        assert started.release(timeout=30)  # handed back, idle: nobody owns it now
        sid = started.session_id
        followed = front.follow(sid)  # never run here, even with nobody owning it
        before = front.store.last_seq(sid)
        task_id = followed.submit("and now?")
        (stored,) = front.store.inbox.commands(sid)
        assert isinstance(stored.command.body, SubmitTask)
        assert stored.command.body.plan.task_id == task_id and stored.command.sender == "front"
        with process(durable_stores, server, "worker") as worker:
            assert worker.adopt() == [sid]  # an inbox command, and no live owner
            ended = wait_for(front.store, sid, TaskCompleted, after=before)
            assert ended.task_id == task_id
            assert followed.history()[-1] == {"role": "assistant", "content": "from the worker"}
            assert worker.adopt() == []  # it owns it now
        assert followed.followed


def test_a_command_is_taken_while_another_sessions_task_is_being_written(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    # The owner hands each command on as it comes: it does not wait for the last one's task
    # to be durable first (one worker's throughput, bench/workers.py).
    server.push(Step(text="slow"), Step(text="quick"))
    with two(durable_stores, server) as (owner, front):
        slow, quick = owner.start_session(), owner.start_session()
        writing, go_on = threading.Event(), threading.Event()
        append = owner.store.append_prepared

        def held(stream: str, prepared: Any, **kwargs: Any) -> list[Event]:
            if stream == slow.session_id:
                writing.set()
                assert go_on.wait(WAIT_SEC)
            return append(stream, prepared, **kwargs)

        owner.store.append_prepared = held  # type: ignore[method-assign]
        try:
            front.follow(slow.session_id).submit("slow")
            assert writing.wait(WAIT_SEC)  # its task's TaskEnqueued is being written, held
            task_id = front.follow(quick.session_id).submit("quick")
            enqueued = wait_for(owner.store, quick.session_id, TaskEnqueued, timeout=WAIT_SEC)
            assert enqueued.task_id == task_id
        finally:
            go_on.set()
        wait_for(owner.store, slow.session_id, TaskCompleted, timeout=WAIT_SEC)
        wait_for(owner.store, quick.session_id, TaskCompleted, timeout=WAIT_SEC)


def test_asyncio_callers_submit_to_and_follow_a_session_owned_elsewhere(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    import asyncio

    server.push(Step(text="one"), Step(text="two"))
    with two(durable_stores, server) as (a, b):
        owned = a.start_session()
        followed = b.resume(owned.session_id)

        async def both() -> list[str]:
            first = await followed.arun("first", timeout=30)
            second = await followed.arun("second", timeout=30)
            return [first.last_assistant_message or "", second.last_assistant_message or ""]

        assert asyncio.run(both()) == ["one", "two"]
        assert followed.followed and a.store.verify(owned.session_id).ok


def test_the_inbox_thread_ends_when_its_store_is_closed_under_it(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    # A runtime whose store an embedder closed first holds nothing: no store call raises, so
    # only the store's state can end its inbox thread (on PostgreSQL it used to spin).
    with process(durable_stores, server, "a") as runtime:
        thread = runtime.owner._thread
        assert thread is not None and thread.is_alive()
        runtime.store.close()
        thread.join(10)
        assert not thread.is_alive()
