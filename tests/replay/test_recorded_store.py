"""The replay's store holds the program where the log has a server's report right after one
of its events: that event's append returns, and the program's next is stored, once the driver
has fed the report in (docs/replay.md#what-replay-feeds-in)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from plait.events import McpServerReady, TurnStarted
from plait.events.stores import MemoryStore
from plait.replay._recorded_store import RecordedStore

T = TypeVar("T")
BODIES = [TurnStarted(turn=1), TurnStarted(turn=2), McpServerReady("s"), TurnStarted(turn=3)]
"""The recorded log: after the program's second event, the report at seq 3 comes first."""


def replaying() -> tuple[RecordedStore, threading.Event]:
    """The replay's store of ``BODIES``, and what is set once the program waits in it."""
    log = MemoryStore()
    log.append("x", BODIES, 0)
    store = RecordedStore(log.read("x"), [], {}, {2: 3}, wait_sec=30)
    holding = threading.Event()

    class Watched(threading.Condition):
        def wait_for(self, predicate: Callable[[], T], timeout: float | None = None) -> T:
            holding.set()
            return super().wait_for(predicate, timeout)

    store._feeding = Watched()
    return store, holding


def in_program(append: Callable[[], object]) -> threading.Event:
    """Run ``append`` on a thread of the program's; what is set once it returned."""
    returned = threading.Event()

    def program() -> None:
        append()
        returned.set()

    threading.Thread(target=program, daemon=True).start()
    return returned


def test_the_program_waits_for_a_report_the_log_has_right_after_its_event() -> None:
    store, holding = replaying()
    store.append("x", [TurnStarted(turn=1)], 0)  # the driver's own: never held
    returned = in_program(lambda: store.append("x", [TurnStarted(turn=2)], 1))
    assert holding.wait(10)  # its event stored, the program waits for the report
    assert [e.body for e in store.read("x")] == BODIES[:2]
    assert not returned.is_set()  # and does nothing meanwhile
    store.fed(3)
    assert returned.wait(10)


def test_the_programs_next_event_waits_for_a_report_after_the_drivers_own() -> None:
    store, holding = replaying()
    # The event the report follows is the driver's (it resumes the program): never held.
    store.append("x", [TurnStarted(turn=1), TurnStarted(turn=2)], 0)
    returned = in_program(lambda: store.append("x", [TurnStarted(turn=3)], 2))
    assert holding.wait(10)  # the program's next event waits for the report
    assert [e.body for e in store.read("x")] == BODIES[:2]  # and is not stored meanwhile
    store.fed(3)
    assert returned.wait(10)
    assert [e.body for e in store.read("x")] == [TurnStarted(turn=i) for i in (1, 2, 3)]


def test_a_report_fed_before_the_program_gets_there_holds_nothing() -> None:
    store, _ = replaying()
    store.fed(3)
    returned = in_program(lambda: store.append("x", [TurnStarted(turn=1), TurnStarted(turn=2)], 0))
    assert returned.wait(10)  # a hold would last the 30 s the store is given
