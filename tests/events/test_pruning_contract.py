"""The pruning part of the store contract (``store.pruning``: ``plait.events._pruning``), on
every backend: a session removed whole with its record, only as its record describes it, and
the positions it held accounted for. ``test_retention.py`` tests what ``prune`` chooses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support import StoreFactory

from plait import ConcurrencyError, StoreError
from plait.events import Command, EventStore, InterruptTask, SessionStarted, TurnStarted
from plait.events._pruned import PrunedSession, position_runs

AT = datetime(2026, 1, 1, tzinfo=UTC)


def record(store: EventStore, stream: str) -> PrunedSession:
    """The record a prune of ``stream``, as it stands, would store."""
    events = store.read(stream)
    last = events[-1]
    positions = position_runs(e.position for e in events)
    return PrunedSession(stream, last.seq, last.hash, len(events), positions, last.at, AT, "test")


def two_sessions(store: EventStore) -> None:
    for stream in ("a", "b"):
        store.append(stream, [SessionStarted(root_conversation_id="root"), TurnStarted(turn=1)], 0)


def test_a_store_never_pruned_has_no_records(store: EventStore) -> None:
    two_sessions(store)
    assert store.pruning.records() == [] and store.pruning.records("a") == []
    assert not store.pruning.covers(1, 1)


def test_removing_a_session_takes_its_events_lease_and_commands_and_keeps_its_record(
    store: EventStore,
) -> None:
    two_sessions(store)
    lease = store.leases.acquire("a", "p1", 10)
    store.leases.release("a", "p1", lease.epoch)
    store.inbox.put("a", Command(InterruptTask()))
    gone = record(store, "a")
    assert isinstance(store.pruning.remove([gone], []), str)
    assert [info.stream for info in store.streams()] == ["b"]
    assert store.last_seq("a") == 0 and store.read("a") == []
    assert store.leases.get("a") is None and store.inbox.commands("a") == []
    assert store.pruning.records() == [gone] == store.pruning.records("a")
    assert store.pruning.records("b") == []
    first, last = gone.positions[0]
    assert store.pruning.covers(first, last)
    assert [e.stream for e in store.read_all()] == ["b", "b"]  # the gap is accounted for
    assert store.verify("b").pruned_sessions == 1
    assert store.verify("a").pruned == gone


def test_a_session_that_moved_on_since_its_record_is_not_removed(store: EventStore) -> None:
    two_sessions(store)
    stale = record(store, "a")
    store.append("a", [TurnStarted(turn=2)], 2)
    with pytest.raises(ConcurrencyError):
        store.pruning.remove([record(store, "b"), stale], [])
    assert [info.stream for info in store.streams()] == ["a", "b"]  # nothing removed
    assert store.pruning.records() == []


def test_a_session_a_live_process_owns_is_not_removed(store: EventStore) -> None:
    two_sessions(store)
    store.leases.acquire("a", "p1", 60)
    with pytest.raises(StoreError, match="session a: its lease is held by p1: not pruned"):
        store.pruning.remove([record(store, "a")], [])
    assert [info.stream for info in store.streams()] == ["a", "b"]
    assert store.pruning.records() == []


def test_a_prune_by_another_process_is_accounted_for(stores: StoreFactory) -> None:
    pruner, reader = stores.open(), stores.open()
    two_sessions(pruner)
    assert [e.stream for e in reader.read_all()] == ["a", "a", "b", "b"]
    gone = record(pruner, "a")
    pruner.pruning.remove([gone], [])
    first, last = gone.positions[0]
    assert reader.pruning.covers(first, last)  # read again, not taken from what it knew
    assert [e.stream for e in reader.read_all()] == ["b", "b"]
