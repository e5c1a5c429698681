"""An owner killed between a task's start and its first turn, while an inbox command lands,
replays clean once another process has gone on with the session.

This makes the log a crash loop of two workers left (issue 47, item 7). The first owner is
killed in a tool call. The second takes the session over: it records the recovery, then starts
the task that waited (``TaskStarted``); a command from another process's inbox lands
(``TaskEnqueued``) before the task's first turn is recorded (no ``TurnStarted``), and the
owner is killed there, with SIGKILL. A third process ends that task ``crashed`` and goes on.

Live, that window is the few milliseconds a conversation takes to build and send its first
request; the second owner, a child process, is held in it (before the turn builds its prompt)
until the parent has seen the command land and kills it, so the kill lands there every time.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from scripted import assert_histories_valid, call, crash
from support import StoreFactory, wait_for_event

import plait
from plait.actors import ModelSettings
from plait.events import (
    Event,
    EventStore,
    SessionResumed,
    TaskEnqueued,
    TaskStarted,
    ToolCallStarted,
    TurnAborted,
    TurnStarted,
)
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

WAIT_SEC = 30.0
REPLAYS = 30
"""How many times the log is replayed: in a replay, whether the program records the started
task's first turn before the command is fed in is a race of its own (each way, the log must
replay clean)."""

SECOND_OWNER = textwrap.dedent(
    """
    import sys, threading
    import plait
    from plait.actors import _turn as turn
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings

    url, base_url, session_id = sys.argv[1:4]

    @plait.tool
    def charge(amount: int) -> str:
        '''Charge the customer.'''
        return "charged"

    prompt = turn.Turn._prompt

    def held(self):
        '''Hold the first turn of a task before it is built: the process is killed here.'''
        if self.number == 1:
            print("held", flush=True)
            threading.Event().wait()
        prompt(self)

    turn.Turn._prompt = held
    settings = ModelSettings(base_url=base_url, api_key="x", model="m")
    runtime = Runtime(url, RuntimeSettings(model=settings, tools=[charge], lease_sec=60.0))
    runtime.resume(session_id)
    threading.Event().wait()  # until killed
    """
)

tool_gate = threading.Event()


@plait.tool
def charge(amount: int) -> str:
    """Charge the customer (not idempotent: a crash leaves it ``unknown``)."""
    tool_gate.wait(WAIT_SEC)
    return "charged"


@pytest.fixture(autouse=True)
def _closed_tool_gate() -> Iterator[None]:
    tool_gate.clear()
    yield
    tool_gate.set()  # the call the first crash cut runs on in its thread: let it end


def owner(stores: StoreFactory, server: ScriptedModelServer) -> Runtime:
    """A process's runtime on the factory's database."""
    settings = ModelSettings(base_url=server.base_url, api_key="x", model="m", backoff_sec=0.01)
    return Runtime(stores.open(), RuntimeSettings(model=settings, tools=[charge], lease_sec=60.0))


def killed_between_start_and_turn(
    stores: StoreFactory, server: ScriptedModelServer, session_id: str
) -> str:
    """Take the session over in a child process, land an inbox command once its waiting task
    has started, and kill it with SIGKILL before that task's first turn; return the
    command's task."""
    watch = stores.open()
    after = watch.last_seq(session_id)
    argv = [stores.url, server.base_url, session_id]
    child = subprocess.Popen(
        [sys.executable, "-c", SECOND_OWNER, *argv],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        # Its task started (made, written with what is recorded next) and its turn is held.
        ready, _, _ = select.select([child.stdout], [], [], WAIT_SEC)
        assert ready and child.stdout.readline() == "held\n", "the second owner was not held"
        with owner(stores, server) as front:  # another process's command, through the inbox
            queued = front.follow(session_id).submit("And this.")
        wait_for_event(watch, session_id, TaskEnqueued, after=after, timeout=WAIT_SEC)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=WAIT_SEC)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL, f"the child exited with {child.returncode}"
    return queued


def test_an_owner_killed_between_task_start_and_turn_start_replays(
    durable_stores: StoreFactory,
) -> None:
    script = [
        Step(tool_calls=[call("charge", amount=5)]),  # the first owner is killed in it
        Step(text="Queued answered."),  # the inbox command's task, run by the third
        Step(text="Going on."),
    ]
    with ScriptedModelServer(script) as server:
        first = owner(durable_stores, server)
        session = first.start_session()
        charged = session.submit("Charge it.")
        waiting = session.submit("Then this.")
        wait_for_event(first.store, session.session_id, ToolCallStarted, timeout=WAIT_SEC)
        crash(first, session)
        queued = killed_between_start_and_turn(durable_stores, server, session.session_id)
        with owner(durable_stores, server) as third:
            outcome = third.resume(session.session_id).run("go on", timeout=WAIT_SEC)
        assert outcome.ok and outcome.last_assistant_message == "Going on."
    store = durable_stores.open()
    events = store.read(session.session_id)
    second = _runs(events)[1]
    assert [(type(e.body), e.task_id) for e in second[-2:]] == [
        (TaskStarted, waiting),
        (TaskEnqueued, queued),
    ]  # killed after the waiting task's start, the command landed, no turn began
    assert not any(isinstance(e.body, TurnStarted) for e in second)
    ends = [e.task_id for e in events if isinstance(e.body, TurnAborted)]
    assert ends == [charged, waiting]  # each ended crashed by the next owner
    assert_replays(store, session.session_id)


def assert_replays(store: EventStore, session_id: str) -> None:
    """Assert that the session verifies and replays clean, each of ``REPLAYS`` times."""
    assert store.verify(session_id).ok
    for _ in range(REPLAYS):
        result = replay(store, session_id, timeout=5)
        assert result.ok, result.divergence and result.divergence.message()
    assert_histories_valid(store.read(session_id))


def _runs(events: list[Event]) -> list[list[Event]]:
    """The events each process recorded, split at each ``SessionResumed``."""
    runs: list[list[Event]] = [[]]
    for event in events:
        if isinstance(event.body, SessionResumed):
            runs.append([])
        runs[-1].append(event)
    return runs
