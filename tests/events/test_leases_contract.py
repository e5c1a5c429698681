"""The leases part of the store contract (``store.leases``: ``plait.events._leases``), on every
backend: who owns a session, and the appends its former owners can no longer make."""

from __future__ import annotations

import threading

import pytest
from support import StoreFactory

from plait._errors import ConcurrencyError, LeaseLostError
from plait.events import EventStore, NewEvent, SessionStarted, TurnStarted

LAPSED = -1.0
"""A lease time that has already run out: the lease is taken and lapsed at once."""


def start(store: EventStore, stream: str = "s1", epoch: int | None = None) -> None:
    store.append(stream, [SessionStarted(root_conversation_id="root")], 0, epoch=epoch)


def turn(store: EventStore, stream: str, epoch: int | None) -> None:
    store.append(
        stream, [NewEvent(TurnStarted(turn=1), "root", "t1")], store.last_seq(stream), epoch=epoch
    )


def test_a_free_session_is_taken_and_a_held_one_is_not(store: EventStore) -> None:
    assert store.leases.get("s1") is None
    taken = store.leases.acquire("s1", "a", 10)
    assert (taken.owner, taken.epoch, taken.live) == ("a", 1, True)
    refused = store.leases.acquire("s1", "b", 10)
    assert (refused.owner, refused.epoch) == ("a", 1)  # b is told who holds it
    again = store.leases.acquire("s1", "a", 10)
    assert (again.owner, again.epoch) == ("a", 1)  # renewed, not taken anew
    assert [(lease.stream, lease.owner) for lease in store.leases.all()] == [("s1", "a")]


def test_many_leases_are_taken_at_once_each_as_one_would_be(store: EventStore) -> None:
    store.leases.acquire("held", "b", 10)
    store.leases.acquire("lapsed", "b", LAPSED)
    store.leases.acquire("mine", "a", 10)
    leases = store.leases.acquire_many(["new", "held", "lapsed", "mine", "new"], "a", 10)
    assert [(x.stream, x.owner, x.epoch) for x in leases] == [
        ("new", "a", 1),
        ("held", "b", 1),  # b keeps it, and a is told
        ("lapsed", "a", 2),
        ("mine", "a", 1),  # renewed, not taken anew
    ]
    assert store.leases.acquire_many([], "a", 10) == []


def test_a_lapsed_lease_is_taken_with_a_higher_epoch(store: EventStore) -> None:
    store.leases.acquire("s1", "a", LAPSED)
    lease = store.leases.get("s1")
    assert lease is not None and not lease.live and lease.held_by("a")
    taken = store.leases.acquire("s1", "b", 10)
    assert (taken.owner, taken.epoch) == ("b", 2)


def test_an_append_of_a_former_owner_is_refused_and_adds_nothing(store: EventStore) -> None:
    a = store.leases.acquire("s1", "a", LAPSED)
    start(store, epoch=a.epoch)
    b = store.leases.acquire("s1", "b", 10)
    with pytest.raises(LeaseLostError, match=r"session s1: .*epoch 1.*now epoch 2, held by b"):
        turn(store, "s1", a.epoch)
    assert store.last_seq("s1") == 1
    turn(store, "s1", b.epoch)
    assert store.last_seq("s1") == 2
    assert store.verify("s1").ok


def test_a_lost_lease_is_reported_before_a_moved_head(store: EventStore) -> None:
    a = store.leases.acquire("s1", "a", LAPSED)
    start(store, epoch=a.epoch)
    b = store.leases.acquire("s1", "b", 10)
    turn(store, "s1", b.epoch)
    with pytest.raises(LeaseLostError):  # not a ConcurrencyError: retrying would not help
        store.append("s1", [NewEvent(TurnStarted(turn=2), "root", "t1")], 1, epoch=a.epoch)
    with pytest.raises(ConcurrencyError):
        store.append("s1", [NewEvent(TurnStarted(turn=2), "root", "t1")], 1, epoch=b.epoch)


def test_an_append_to_a_session_without_a_lease_is_refused_when_fenced(store: EventStore) -> None:
    with pytest.raises(LeaseLostError, match="no lease"):
        start(store, epoch=1)
    start(store)  # unfenced: a tool writing its own streams
    assert store.last_seq("s1") == 1


def test_release_frees_the_session_and_fences_the_releaser(store: EventStore) -> None:
    a = store.leases.acquire("s1", "a", 10)
    start(store, epoch=a.epoch)
    assert not store.leases.release("s1", "a", a.epoch + 1)  # not its epoch: nothing
    assert store.leases.release("s1", "a", a.epoch)
    lease = store.leases.get("s1")
    assert lease is not None and lease.owner is None and not lease.live
    with pytest.raises(LeaseLostError, match="released at epoch 1"):
        turn(store, "s1", a.epoch)
    assert store.leases.acquire("s1", "a", 10).epoch == 2  # taken anew, even by the same owner


def test_a_release_with_work_waiting_leaves_the_lease_lapsed(store: EventStore) -> None:
    a = store.leases.acquire("s1", "a", 10)
    assert store.leases.release("s1", "a", a.epoch, idle=False)
    lease = store.leases.get("s1")
    assert lease is not None and lease.held_by("a") and not lease.live
    assert store.leases.acquire("s1", "b", 10).owner == "b"


def test_renew_answers_the_leases_still_held(store: EventStore) -> None:
    store.leases.acquire("s1", "a", LAPSED)
    store.leases.acquire("s2", "a", LAPSED)
    store.leases.acquire("s3", "b", 10)
    held = {"s1": 1, "s2": 1}
    assert store.leases.renew("a", 10, held) == held  # lapsed, not taken: still a's
    assert all(lease.live for lease in store.leases.all())
    store.leases.release("s2", "a", 1)
    assert store.leases.renew("a", 10, held) == {"s1": 1}
    assert store.leases.renew("a", 10, {"s1": 2, "s3": 1}) == {}  # not at that epoch, not a's
    assert store.leases.renew("a", 10, {}) == {}


@pytest.mark.parametrize("end", ["release", "release with work waiting", "expire"])
def test_a_lease_ended_on_purpose_is_not_revived_by_its_owners_renewal(
    store: EventStore, end: str
) -> None:
    a = store.leases.acquire("s1", "a", 60)
    store.leases.acquire("s2", "a", 60)
    if end == "expire":
        assert store.leases.expire("s1", "a", a.epoch)
    else:
        assert store.leases.release("s1", "a", a.epoch, idle=end == "release")
    # A renewal that was under way as it ended (it still names s1), and any later one.
    for _ in range(2):
        assert store.leases.renew("a", 60, {"s1": a.epoch, "s2": 1}) == {"s2": 1}
        lease = store.leases.get("s1")
        assert lease is not None and not lease.live and lease.epoch == a.epoch
        assert lease.owner == (None if end == "release" else "a")
    b = store.leases.acquire("s1", "b", 60)
    assert (b.owner, b.epoch) == ("b", 2)  # taken at once, as after a lapse
    assert store.leases.renew("a", 60, {"s1": a.epoch}) == {}
    lease = store.leases.get("s1")
    assert lease is not None and lease.live and lease.owner == "b"


def test_one_owner_wins_a_race_for_a_free_session(stores: StoreFactory) -> None:
    opened = [stores.open() for _ in range(4)]  # as separate processes would
    won: list[str] = []
    gate = threading.Barrier(len(opened))

    def take(store: EventStore, owner: str) -> None:
        gate.wait()
        if store.leases.acquire("s1", owner, 10).owner == owner:
            won.append(owner)

    threads = [threading.Thread(target=take, args=(s, f"p{i}")) for i, s in enumerate(opened)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    lease = opened[0].leases.get("s1")
    assert lease is not None and (lease.owner, lease.epoch) == (won[0], 1)


def test_expiring_a_dead_owners_lease_lets_the_next_take_it_at_a_higher_epoch(
    store: EventStore,
) -> None:
    a = store.leases.acquire("s1", "a", 60)
    start(store, epoch=a.epoch)
    assert not store.leases.expire("s1", "a", a.epoch + 1)  # not its epoch: nothing
    assert not store.leases.expire("s1", "b", a.epoch)  # not its owner: nothing
    held = store.leases.get("s1")
    assert held is not None and held.live and held.epoch == a.epoch
    assert store.leases.expire("s1", "a", a.epoch)
    lease = store.leases.get("s1")
    assert lease is not None and lease.held_by("a") and not lease.live
    b = store.leases.acquire("s1", "b", 60)
    assert (b.owner, b.epoch) == ("b", 2)  # as after a lapse
    assert not store.leases.expire("s1", "a", a.epoch)  # taken meanwhile: b's lease stands
    held = store.leases.get("s1")
    assert held is not None and held.live and held.owner == "b"
    with pytest.raises(LeaseLostError, match="now epoch 2, held by b"):
        turn(store, "s1", a.epoch)  # were it alive after all, it could add nothing
    turn(store, "s1", b.epoch)
    assert store.verify("s1").ok
