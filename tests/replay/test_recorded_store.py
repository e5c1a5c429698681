"""The replay's store holds the program where the log has a server's report right after one
of its events: that event's append returns once the driver has fed the report in
(docs/replay.md#what-replay-feeds-in)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from plait.events import McpServerReady, TurnStarted
from plait.events.stores.memory import MemoryStore
from plait.replay.recorded_store import RecordedStore


def test_the_program_waits_for_a_report_the_log_has_right_after_its_event() -> None:
    log = MemoryStore()
    bodies = [TurnStarted(turn=1), TurnStarted(turn=2), McpServerReady("s"), TurnStarted(turn=3)]
    log.append("x", bodies, 0)
    # After the program's second event, the report at seq 3 comes first.
    store = RecordedStore(log.read("x"), [], {}, {2: 3}, wait_sec=30)
    store.append("x", [TurnStarted(turn=1)], 0)  # the driver's own: never held
    holding, returned = threading.Event(), threading.Event()

    class Watched(threading.Condition):
        def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
            holding.set()
            return super().wait_for(predicate, timeout)

    store._feeding = Watched()

    def program() -> None:
        store.append("x", [TurnStarted(turn=2)], 1)
        returned.set()

    threading.Thread(target=program, daemon=True).start()
    assert holding.wait(10)  # its event stored, the program waits for the report
    assert [e.body for e in store.read("x")] == [TurnStarted(turn=1), TurnStarted(turn=2)]
    assert not returned.is_set()  # and does nothing meanwhile
    store.fed(3)
    assert returned.wait(10)


def test_a_report_fed_before_the_program_gets_there_holds_nothing() -> None:
    log = MemoryStore()
    log.append("x", [TurnStarted(turn=1), McpServerReady("s"), TurnStarted(turn=2)], 0)
    store = RecordedStore(log.read("x"), [], {}, {1: 2}, wait_sec=30)
    store.fed(2)
    stored = threading.Event()
    threading.Thread(
        target=lambda: (store.append("x", [TurnStarted(turn=1)], 0), stored.set()), daemon=True
    ).start()
    assert stored.wait(10)
