"""An append made ahead by its stream's writer (``prepare``), written after it."""

from __future__ import annotations

import pytest

from plait._errors import ConcurrencyError, LeaseLostError
from plait.events import GENESIS_HASH, EventStore, PreparedAppend, SessionClosed


def test_what_is_made_ahead_is_stored_as_an_append_would_store_it(store: EventStore) -> None:
    first = store.append("s", [SessionClosed("1")], 0)
    made = store.prepare("s", [SessionClosed("2"), SessionClosed("3")], 1, first[-1].hash)
    more = store.prepare("s", [SessionClosed("4")], 3, made.events[-1].hash)

    written = store.append_prepared("s", PreparedAppend.joined([made, more]))

    assert written == store.read("s")[1:]
    assert [e.seq for e in written] == [2, 3, 4] and written[-1].position > first[0].position
    assert [e.hash for e in written] == [e.hash for e in [*made.events, *more.events]]
    assert store.verify("s").ok


def test_an_append_made_after_a_head_that_moved_is_refused_whole(store: EventStore) -> None:
    made = store.prepare("s", [SessionClosed("mine")], 0, GENESIS_HASH)
    store.append("s", [SessionClosed("another writer's")], 0)
    with pytest.raises(ConcurrencyError):
        store.append_prepared("s", made)

    # Its seq, after another event with that seq: still refused, by the chain.
    replaced = store.prepare("s", [SessionClosed("x")], 0, GENESIS_HASH)
    store.append("s", [SessionClosed("y")], 1)
    late = store.prepare("s", [SessionClosed("late")], 1, replaced.events[0].hash)
    with pytest.raises(ConcurrencyError):
        store.append_prepared("s", late)
    assert [e.body for e in store.read("s")] == [
        SessionClosed("another writer's"),
        SessionClosed("y"),
    ]


def test_an_append_made_ahead_is_fenced_by_the_lease(store: EventStore) -> None:
    lease = store.leases.acquire("s", "a", 30.0)
    assert lease is not None
    made = store.prepare("s", [SessionClosed("a")], 0, GENESIS_HASH)
    store.leases.release("s", "a", lease.epoch)
    assert store.leases.acquire("s", "b", 30.0) is not None

    with pytest.raises(LeaseLostError):
        store.append_prepared("s", made, epoch=lease.epoch)
    assert store.read("s") == []
