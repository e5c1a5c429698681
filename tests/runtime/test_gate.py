"""``RuntimeSettings(max_running_tasks=)``: run slots bound the tasks running at once over all
sessions (docs/processes.md#capacity); a slot goes back however its task ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from scripted import runtime_for
from support import StoreFactory

from plait import ConfigError
from plait._scripted_wire import ScriptedToolCall
from plait.events import Event, TaskCompleted, TaskEnqueued, TaskStarted, TurnAborted
from plait.replay import replay
from plait.runtime import Runtime, SessionHandle
from plait.runtime._gate import TaskGate
from plait.testing import ScriptedModelServer, Step

SLOTS, SESSIONS, TASKS = 2, 6, 3
REPLY = Step(text="a reply in pieces " * 4, chunk_chars=6, chunk_delay=0.01)
ENDLESS = Step(text="x" * 2000, chunk_chars=1, chunk_delay=0.05)
"""A reply that streams for 100 s: the task runs until it is cut."""


def most_running_at_once(events: list[Event]) -> int:
    """The most tasks the log shows started and not yet ended, in the store's order."""
    running = most = 0
    for event in events:
        if isinstance(event.body, TaskStarted):
            running += 1
            most = max(most, running)
        elif isinstance(event.body, TaskCompleted | TurnAborted):
            running -= 1
    return most


async def run_all_at_once(handles: list[SessionHandle], tasks: int) -> None:
    """Submit ``tasks`` tasks to every session at once; return once every one completed."""

    async def session(handle: SessionHandle) -> None:
        with handle.subscribe(transient=False) as feed:
            waiting = {await handle.asubmit(f"task {i}") for i in range(tasks)}
            async for item in feed:
                if isinstance(item, Event) and isinstance(item.body, TaskCompleted):
                    waiting.discard(item.task_id or "")
                    if not waiting:
                        return

    await asyncio.wait_for(asyncio.gather(*(session(h) for h in handles)), 120)


async def test_n_slots_never_run_more_than_n_tasks_and_every_task_finishes(
    tmp_path: Path, durable_stores: StoreFactory
) -> None:
    # The log's order is the stores' commit order: a slot goes back once the end is durable.
    steps = [REPLY] * (SESSIONS * TASKS)
    store = durable_stores.open()
    with (
        ScriptedModelServer(steps) as server,
        runtime_for(server, tmp_path, store=store, max_running_tasks=SLOTS) as runtime,
    ):
        handles = [runtime.start_session() for _ in range(SESSIONS)]
        await run_all_at_once(handles, TASKS)
        ids = {h.session_id for h in handles}
        events = [e for e in runtime.store.read_all(0, limit=None) if e.stream in ids]
        # A slot goes back once its task's end is durable, which may be just after a
        # caller heard of the end: wait for the last one, with a timeout.
        assert settles(lambda: runtime.gate.running == 0 and runtime.gate.waiting == 0)
        # Idle sessions keep their actors: no bound on them was asked for.
        assert runtime.active_sessions == SESSIONS
    started = [e.task_id for e in events if isinstance(e.body, TaskStarted)]
    completed = [e.task_id for e in events if isinstance(e.body, TaskCompleted)]
    enqueued = [e.task_id for e in events if isinstance(e.body, TaskEnqueued)]
    assert len(enqueued) == SESSIONS * TASKS
    assert sorted(started) == sorted(completed) == sorted(enqueued)
    assert most_running_at_once(events) == SLOTS  # never more, and the slots were used
    for session_id in ids:  # started late, each replays as it ran
        result = replay(store, session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()


async def test_a_waiting_task_holds_no_thread_and_starts_in_the_order_sessions_came(
    tmp_path: Path,
) -> None:
    with (
        ScriptedModelServer([ENDLESS, *[REPLY] * 6]) as server,
        runtime_for(server, tmp_path, max_running_tasks=1) as runtime,
    ):
        first, *rest = [runtime.start_session() for _ in range(4)]
        await first.asubmit("runs")
        waiting = [await h.asubmit(f"waits {i}") for i, h in enumerate(rest)]
        for handle in rest:  # queued in the log, not started: the slot is taken
            log = runtime.store.read(handle.session_id)
            assert [type(e.body) for e in log[-1:]] == [TaskEnqueued]
        assert runtime.gate.waiting == 3
        first.interrupt()
        outcomes = [h.arun("then", timeout=60) for h in rest]  # each after its first task
        for outcome in await asyncio.gather(*outcomes):
            assert outcome.ok
        starts = [
            next(
                e.position
                for e in runtime.store.read(h.session_id)
                if isinstance(e.body, TaskStarted) and e.task_id == task
            )
            for h, task in zip(rest, waiting, strict=True)
        ]
        assert starts == sorted(starts)  # FIFO over the sessions


def _hold(entered: threading.Event, release: threading.Event) -> Callable[[], str]:
    def hold() -> str:
        """Wait until the test lets the task go on."""
        entered.set()
        release.wait(30)
        return "held"

    return hold


HOLD = Step(tool_calls=[ScriptedToolCall("hold")])


def _ended(how: str, runtime: Runtime, running: SessionHandle, release: threading.Event) -> None:
    """End ``running``'s task (which holds the only slot) ``how``."""
    if how in ("completed", "failed"):
        release.set()  # the next model reply completes it, or fails it
    elif how == "interrupted":
        running.interrupt()
        release.set()
    elif how == "closed":
        # The close interrupts the held call; released first, the reply could end the task.
        closing = threading.Thread(target=running.close, args=(10,))
        closing.start()
        assert settles(lambda: _aborted(runtime, running))
        release.set()
        closing.join(30)
    elif how == "handed back":
        runtime.sessions.hosts[running.session_id].handle.release(10, grace_sec=0)
        release.set()
    elif how == "lost":
        # As a lease another process took.
        runtime.sessions.hosts[running.session_id].crash(timeout=5)
        release.set()


def _aborted(runtime: Runtime, session: SessionHandle) -> bool:
    """Whether ``session``'s log holds a task's ``TurnAborted``."""
    return any(isinstance(e.body, TurnAborted) for e in runtime.store.read(session.session_id))


@pytest.mark.parametrize(
    "how", ["completed", "failed", "interrupted", "closed", "handed back", "lost"]
)
def test_the_slot_goes_back_however_the_task_ends(tmp_path: Path, how: str) -> None:
    entered, release = threading.Event(), threading.Event()
    second = Step(status=400, error_message="no") if how == "failed" else Step(text="a done")
    with (
        ScriptedModelServer([HOLD, second, Step(text="b done"), Step(text="b again")]) as server,
        runtime_for(
            server, tmp_path, max_running_tasks=1, tools=[_hold(entered, release)]
        ) as runtime,
    ):
        a, b = runtime.start_session(), runtime.start_session()
        task_a = a.submit("hold the slot")
        assert entered.wait(30)  # its tool call runs: the slot is held
        task_b = b.submit("wait for it")
        log_b = runtime.store.read(b.session_id)
        assert not any(isinstance(e.body, TaskStarted) for e in log_b)
        _ended(how, runtime, a, release)
        outcome = b.run("and then", timeout=60)  # queued behind task_b: both ran
        assert outcome.ok, outcome
        ends_a = [
            e
            for e in runtime.store.read(a.session_id)
            if e.task_id == task_a and isinstance(e.body, TaskCompleted | TurnAborted)
        ]
        start_b = next(
            e
            for e in runtime.store.read(b.session_id)
            if e.task_id == task_b and isinstance(e.body, TaskStarted)
        )
        if how == "lost":  # its end is its next owner's to record
            assert not ends_a
        else:
            assert ends_a[0].position < start_b.position
            assert isinstance(ends_a[0].body, TaskCompleted) == (how == "completed")
        assert settles(lambda: runtime.gate.running == 0 and runtime.gate.waiting == 0)


def test_the_gate_passes_a_slot_on_in_order_and_past_a_session_that_stopped() -> None:
    woken: list[str] = []
    gate = TaskGate(1)
    assert gate.enter("a", lambda: woken.append("a"))
    assert gate.enter("a", lambda: woken.append("a"))  # held: asking again takes no second

    def dead() -> None:
        raise RuntimeError("its actor stopped")

    assert not gate.enter("b", dead)
    assert not gate.enter("c", lambda: woken.append("c"))
    assert not gate.enter("c", lambda: woken.append("c again"))  # in line once
    assert not gate.enter("d", lambda: woken.append("d"))
    assert (gate.running, gate.waiting) == (1, 3)
    gate.leave("d")  # leaves the line
    gate.leave("a")  # b cannot take it: c does
    assert woken == ["c"] and gate.holds("c") and not gate.holds("b")
    assert (gate.running, gate.waiting) == (1, 0)
    assert gate.room(busy=1) == 0
    gate.leave("c")
    assert gate.room(busy=0) == 1
    gate.leave("c")  # twice: nothing


def test_a_slot_given_back_is_told_once_after_each_want() -> None:
    told: list[str] = []
    gate = TaskGate(2, lambda: told.append("free"))
    assert gate.enter("a", lambda: None) and gate.enter("b", lambda: None)
    gate.leave("a")  # nobody found no room: nobody is told
    assert told == []
    gate.want()  # a worker found no room for more work
    gate.leave("b")
    assert told == ["free"]
    assert gate.enter("c", lambda: None)
    gate.leave("c")  # told once per want
    assert told == ["free"]


def test_no_slot_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="max_running_tasks: expected at least 1, got 0"):
        TaskGate(0)
    unbounded = TaskGate(None)
    assert all(unbounded.enter(str(i), lambda: None) for i in range(100))
    assert unbounded.room(busy=100) is None


def settles(done: Callable[[], bool], within: float = 10.0) -> bool:
    """Whether ``done()`` comes true within ``within`` seconds (looked at every 10 ms)."""
    deadline = time.monotonic() + within
    pause = threading.Event()
    while not done():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.01)
    return True
