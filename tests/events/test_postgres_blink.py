"""The PostgreSQL store across dropped connections (docs/failures.md#the-store-blinks): each
call reconnects and is made again, a write whose answer was lost is not written twice, and a
server away past ``outage_sec`` is ``StoreUnavailableError`` until it is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from blinks import Blinks
from support import StoreFactory

from plait import ConcurrencyError, StoreUnavailableError
from plait.events import GENESIS_HASH, Command, EventStore, InterruptTask, TurnStarted
from plait.events.stores import PostgresStore


@pytest.fixture
def cut(tmp_path: Path) -> Iterator[tuple[Blinks, PostgresStore, EventStore]]:
    """The rounds; a store whose connections they end; one on the test's own connection."""
    stores = StoreFactory("postgres", tmp_path)
    control = stores.open()
    rounds = Blinks(stores.schema, "&outage_sec=1")
    store = PostgresStore(rounds.url)
    try:
        yield rounds, store, control
    finally:
        store.close()
        rounds.close()
        stores.close()


def test_a_read_whose_connection_was_cut_is_made_again(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, _ = cut
    store.append("s", [TurnStarted(turn=1)], 0)
    assert rounds.round() >= 1  # the store's (and its announcer's, once it has connected)
    assert [e.seq for e in store.read("s")] == [1]
    assert store.outage_sec == 1.0


def test_an_append_cut_before_it_committed_is_written_once(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, control = cut
    store.append("s", [TurnStarted(turn=1)], 0)
    rounds.round()
    store.append("s", [TurnStarted(turn=2)], 1)
    assert [e.body for e in control.read("s")] == [TurnStarted(turn=1), TurnStarted(turn=2)]
    assert control.verify("s").ok


def test_an_append_whose_answer_was_lost_is_not_written_twice(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, control = cut
    prepared = store.prepare("s", [TurnStarted(turn=1), TurnStarted(turn=2)], 0, GENESIS_HASH)
    # Its commit lands (made here by the control store) and the writer's connection is cut
    # before it hears of it: its try, made again, finds it written.
    landed = control.append_prepared("s", prepared)
    rounds.round()
    assert store.append_prepared("s", prepared) == landed
    assert len(control.read("s")) == 2
    other = store.prepare("s", [TurnStarted(turn=9)], 0, GENESIS_HASH)  # not what is there
    rounds.round()
    with pytest.raises(ConcurrencyError):
        store.append_prepared("s", other)


def test_a_command_whose_answer_was_lost_is_not_stored_twice(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, control = cut
    command = Command(InterruptTask(), sender="front")
    stored = control.inbox.put("s", command)
    rounds.round()
    assert store.inbox.put("s", command) == stored
    assert [c.id for c in control.inbox.commands("s")] == [stored]


def test_a_subscription_goes_on_across_a_cut(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, control = cut
    with store.subscribe() as tail:
        control.append("s", [TurnStarted(turn=1)], 0)
        first = tail.get(timeout=10)
        rounds.round()  # its listening connection too
        control.append("s", [TurnStarted(turn=2)], 1)
        second = tail.get(timeout=10)
    assert first is not None and second is not None and (first.seq, second.seq) == (1, 2)


def test_a_server_away_past_outage_sec_is_unavailable_until_it_is_back(
    cut: tuple[Blinks, PostgresStore, EventStore],
) -> None:
    rounds, store, _ = cut
    store.append("s", [TurnStarted(turn=1)], 0)
    rounds.shut()
    with pytest.raises(StoreUnavailableError, match=r"not back within 1 s \(outage_sec\)"):
        store.read("s")
    rounds.open()
    assert [e.seq for e in store.read("s")] == [1]
