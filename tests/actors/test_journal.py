"""What the journal keeps for the actors that fold what the others record."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pykka
import pytest

from plait._errors import ConcurrencyError, SessionFailedError
from plait.actors import Journal, Kinds
from plait.actors._listening import BACKLOG
from plait.actors._messages import CatchUp
from plait.events import (
    InputText,
    MemoryStore,
    NewEvent,
    SessionClosed,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
)


class Folder(pykka.ThreadingActor):
    """Folds what the others record each time it handles a message, as the session's do."""

    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self.journal = journal
        self.seqs: list[int] = []
        self.told = 0
        self.caught_up = threading.Event()

    def on_receive(self, message: Any) -> Any:
        self.seqs += [event.seq for event in self.journal.listeners.recorded(self.actor_ref)]
        if isinstance(message, CatchUp):
            self.told += 1
            self.caught_up.set()
        return list(self.seqs)


def listening(journal: Journal, count: int) -> list[pykka.ActorRef[Folder]]:
    """``count`` folders started and listening to ``journal``."""
    refs = [Folder.start(journal) for _ in range(count)]
    for ref in refs:
        journal.listeners.listen(ref)
    return refs


@pytest.fixture
def journal() -> Iterator[Journal]:
    yield Journal(MemoryStore(), "s")
    pykka.ActorRegistry.stop_all()


def test_an_actor_folds_what_the_others_recorded_before_its_next_message(
    journal: Journal,
) -> None:
    writer, reader = listening(journal, 2)

    journal.record([SessionClosed("a")], origin=writer)
    journal.record([SessionClosed("b"), SessionClosed("c")])  # by the session's owner

    assert reader.ask("next") == [1, 2, 3]
    assert writer.ask("next") == [2, 3]  # its own group it folded as it recorded it
    assert reader.ask("again") == [1, 2, 3]  # each group once


def test_an_actor_with_no_messages_is_told_to_fold_before_too_much_piles_up(
    journal: Journal,
) -> None:
    busy, idle = listening(journal, 2)
    idle_folder = idle.proxy()

    for i in range(BACKLOG + 1):
        journal.record([SessionClosed(str(i))], origin=busy)
        busy.ask("next")  # the recording actor takes its messages as it goes
    assert idle_folder.caught_up.get().wait(5)

    for i in range(3 * BACKLOG):
        journal.record([SessionClosed(str(i))], origin=busy)
        busy.ask("next")
    assert idle.ask("next") == list(range(1, 4 * BACKLOG + 2))
    assert 1 <= idle_folder.told.get() <= 4  # told once per BACKLOG, not per group


def test_an_actor_that_stops_listening_holds_nothing_back(journal: Journal) -> None:
    (gone,) = listening(journal, 1)
    journal.listeners.unlisten(gone)
    (fresh,) = listening(journal, 1)

    journal.record([SessionClosed("after")])

    assert gone.ask("next") == []
    assert fresh.ask("next") == [1]


def test_a_stopped_actor_that_never_unlistened_is_forgotten(journal: Journal) -> None:
    (dead,) = listening(journal, 1)
    dead.stop()
    (alive,) = listening(journal, 1)

    for i in range(2 * BACKLOG):
        journal.record([SessionClosed(str(i))])
        alive.ask("next")

    # Nothing is kept for the stopped actor: a new listener's groups start at the end.
    assert journal.listeners.recorded(dead) == []
    assert len(journal.listeners._kept) <= BACKLOG + 1


def test_a_feed_of_kinds_holds_only_those_and_wakes_its_reader_only_for_the_waking() -> None:
    journal = Journal(MemoryStore(), "s")
    kinds = Kinds(held=(TaskEnqueued, TaskCompleted), waking=(TaskCompleted,))
    feed = journal.feed(transient=False, kinds=kinds)
    plan = TaskPlan("t1", "root", [InputText("go")])

    async def read() -> tuple[bool, list[Any]]:
        reader = asyncio.create_task(feed.aget(timeout=30))
        await asyncio.sleep(0)  # it waits on its future
        journal.record([NewEvent(TaskEnqueued(plan), "root", "t1"), TaskStarted()])
        for _ in range(5):  # a wake-up, had one been sent, would have run by now
            await asyncio.sleep(0)
        woken_early = reader.done()
        journal.record([TaskCompleted("done")])
        return woken_early, [await reader, feed.get(timeout=0), feed.get(timeout=0)]

    woken_early, items = asyncio.run(read())

    assert not woken_early
    assert [type(item.body) if item else None for item in items] == [
        TaskEnqueued,
        TaskCompleted,
        None,
    ]  # TaskStarted was never held


def test_a_seal_waits_for_what_an_actor_is_starting_and_then_nothing_starts(
    journal: Journal,
) -> None:
    sealed = threading.Event()
    with journal.unsealed() as live:
        assert live
        sealer = threading.Thread(target=lambda: (journal.seal(), sealed.set()))
        sealer.start()
        assert not sealed.wait(0.05)  # it waits for the start under way
    assert sealed.wait(30)
    sealer.join(30)
    with journal.unsealed() as live:
        assert not live  # the session is being stopped: an actor starts nothing more


def test_what_is_made_ahead_is_folded_at_once_and_heard_outside_once_durable(
    journal: Journal,
) -> None:
    feed = journal.feed(transient=False)
    (reader,) = listening(journal, 1)

    made = journal.record([SessionClosed("a"), SessionClosed("b")], ahead=True)

    assert [e.seq for e in made] == [1, 2] and all(e.hash for e in made)
    assert reader.ask("next") == [1, 2]  # the actors fold it before it is durable
    assert journal.store.read("s") == [] and feed.get(timeout=0) is None  # nobody else hears
    assert journal.flush()
    assert [e.seq for e in journal.store.read("s")] == [1, 2]
    assert [e.hash for e in journal.store.read("s")] == [e.hash for e in made]
    assert [feed.get(timeout=0), feed.get(timeout=0)] == made


def test_a_record_after_one_made_ahead_writes_that_one_first(journal: Journal) -> None:
    feed = journal.feed(transient=False)
    journal.record([SessionClosed("ahead")], ahead=True)

    journal.record([SessionClosed("now")])  # no flush in between

    assert [e.body for e in journal.store.read("s")] == [
        SessionClosed("ahead"),
        SessionClosed("now"),
    ]
    heard = [feed.get(timeout=0), feed.get(timeout=0)]
    assert [e.seq for e in heard if e is not None] == [1, 2]


def test_a_write_ahead_the_store_refuses_stops_the_session_and_says_why() -> None:
    lost: list[Exception] = []
    journal = Journal(MemoryStore(), "s", on_lost=lost.append)
    feed = journal.feed(transient=False)
    journal.record([SessionClosed("ahead")], ahead=True)
    journal.store.append("s", [SessionClosed("another writer")], 0)  # the log moved meanwhile

    assert not journal.flush()

    assert [type(e).__name__ for e in lost] == ["SessionFailedError"]
    assert isinstance(journal.refusal, ConcurrencyError)
    assert isinstance(lost[0], SessionFailedError) and lost[0].cause is journal.refusal
    journal.fail_feeds(lost[0])  # as the session's handle does, once told
    with pytest.raises(SessionFailedError):
        feed.get(timeout=0)  # the reader hears why, not a silently shorter history
    assert journal.record([SessionClosed("later")]) == []  # sealed: nothing more is written
    assert [e.body for e in journal.store.read("s")] == [SessionClosed("another writer")]


def test_a_store_that_cannot_write_ahead_has_the_events_written_at_once() -> None:
    store = MemoryStore()
    store.writes_ahead = False
    journal = Journal(store, "s")

    made = journal.record([SessionClosed("a")], ahead=True)

    assert store.read("s") == made


def test_who_waits_for_what_was_made_ahead_hears_once_it_is_written(journal: Journal) -> None:
    heard: list[object] = []
    journal.when_durable(heard.append)  # nothing waits to be written: at once
    journal.record([SessionClosed("a")], ahead=True)
    journal.when_durable(heard.append)
    assert heard == [None]

    assert journal.flush()

    assert heard == [None, None] and len(journal.store.read("s")) == 1


def test_a_takeover_forgets_what_the_actors_before_it_made_and_did_not_write(
    journal: Journal,
) -> None:
    heard: list[object] = []
    journal.record([SessionClosed("made, never written")], ahead=True)
    journal.when_durable(heard.append)

    lease = journal.store.leases.acquire("s", "me", 30.0)
    journal.reload([], epoch=lease.epoch)  # this process took the session over (empty log)

    assert [type(e).__name__ for e in heard] == ["LeaseLostError"]
    assert journal.flush()  # nothing is left to write
    assert [e.seq for e in journal.record([SessionClosed("after")])] == [1]
    assert [e.body for e in journal.store.read("s")] == [SessionClosed("after")]
