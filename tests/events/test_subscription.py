"""``Subscription``: a read that found all there was is not made again until the store may
hold more (a round trip saved on each announcement a PostgreSQL follower wakes to)."""

from __future__ import annotations

import pytest

from plait.events import Event, MemoryStore, TurnStarted


def test_a_subscription_reads_again_only_once_the_store_may_hold_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    store.append("a", [TurnStarted(turn=1)], 0)
    reads: list[int] = []
    read = store._settled_batch

    def counted(after_position: int) -> list[Event]:
        reads.append(after_position)
        return read(after_position)

    monkeypatch.setattr(store, "_settled_batch", counted)
    with store.subscribe() as tail:
        first = tail.get(timeout=5)
        assert first is not None and first.seq == 1
        assert tail.get(timeout=0) is None  # nothing more was there: not read again
        assert len(reads) == 1
        store.append("a", [TurnStarted(turn=2)], 1)
        second = tail.get(timeout=5)
        assert second is not None and second.seq == 2
        assert len(reads) == 2
