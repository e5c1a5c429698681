"""The inbox part of the store contract (``store.inbox``: ``plait.events._inbox``), on every
backend: commands any process stores for a session's owner, in order, until it drops them."""

from __future__ import annotations

import threading

from support import StoreFactory

from plait.events import (
    Command,
    DestroyConversation,
    EventStore,
    InputText,
    InterruptTask,
    StoredCommand,
    SubmitTask,
    TaskPlan,
)


def test_the_inbox_keeps_commands_in_order_until_dropped(stores: StoreFactory) -> None:
    sender, owner = stores.open(), stores.open()
    plan = TaskPlan("t1", "root", [InputText("hello")])
    ids = [
        sender.inbox.put("s1", Command(SubmitTask(plan), sender="p1")),
        sender.inbox.put("s2", Command(InterruptTask())),
        sender.inbox.put("s1", Command(DestroyConversation("c1"))),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 3
    found = owner.inbox.commands("s1")
    assert [c.id for c in found] == [ids[0], ids[2]]
    assert found[0].command == Command(SubmitTask(plan), sender="p1")
    assert found[1].command.body == DestroyConversation("c1")
    assert [c.stream for c in owner.inbox.commands()] == ["s1", "s2", "s1"]
    assert [c.id for c in owner.inbox.commands("s2", "s1")] == ids  # named sessions', in order
    assert owner.inbox.commands("s3") == []
    owner.inbox.drop([found[0], found[0]])
    assert [c.id for c in owner.inbox.commands()] == ids[1:]
    moved = StoredCommand(ids[1], "s1", found[0].command)  # the id, named with another session
    owner.inbox.drop([moved])
    assert [c.id for c in owner.inbox.commands()] == ids[
        1:
    ]  # a command is dropped with its session
    later = sender.inbox.put("s1", Command(InterruptTask()))
    assert later > ids[2]  # ids are never reused: the order holds across drops


class Ear:
    """What hears of commands stored (held weakly, as a bound method)."""

    def __init__(self) -> None:
        self.heard = threading.Event()

    def hear(self) -> None:
        self.heard.set()


def test_a_command_stored_wakes_the_inbox_waiter_and_is_heard(store: EventStore) -> None:
    ear = Ear()
    store.inbox.hear(ear.hear)
    waiter = store.inbox.waiter()
    try:
        token = waiter.token()
        store.inbox.put("s1", Command(InterruptTask()))
        waiter.wait(token, 10.0)
        assert waiter.token() != token
        assert ear.heard.is_set()
    finally:
        waiter.close()
