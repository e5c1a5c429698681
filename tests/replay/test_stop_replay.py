"""A session stopped on purpose, then gone on with by another process, replays clean.

Each case stops the session's runtime as ``plait exec`` and ``plait worker`` do on SIGTERM or
SIGINT (``Runtime.drain`` with a grace period and the signal's reason, what
``cli/_stopping.py`` calls: the same events), wherever the stop finds it: a reply streaming
that ends within the grace, a reply cut at the grace, a tool call running, nothing running,
work queued behind the running task. Another runtime on the same store (another process's, as
``plait exec --session S "go on"`` is) then goes on with the session, and the whole log must
verify and replay clean (docs/replay.md#stops).

The model server holds a reply after its first chunk, and the tool waits, until the test lets
them go: where the stop lands is decided by the test, not by a race. The case as reported
(issue 47, item 1) is also run as a user runs it: real ``plait`` processes and real signals.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from scripted import assert_histories_valid, call, crash
from support import StoreFactory, wait_for_event

import plait
from plait.actors import ModelSettings
from plait.events import (
    AgentMessageDelta,
    Event,
    EventStore,
    SessionResumed,
    SqliteStore,
    StopRequested,
    TaskCompleted,
    TaskEnqueued,
    TaskStarted,
    ToolCallStarted,
    TurnAborted,
)
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

REASON = "stopped by the operator (SIGTERM)"
"""What ``plait exec`` records for a SIGTERM (``cli/_stopping.py``)."""
LONG_GRACE_SEC = 60.0
"""A grace the stopped task ends well within: it ends when the test lets it."""
SHORT_GRACE_SEC = 0.2
"""A grace the held task does not end within: it is cut."""
WAIT_SEC = 30.0
REPLAYS = 10


class HeldServer(ScriptedModelServer):
    """A scripted model server that streams the start of the one reply with a
    ``chunk_delay`` (its role, then its first text), then holds the rest until ``let_go``."""

    def __init__(self, steps: list[Step]) -> None:
        super().__init__(steps)
        self.gate = threading.Event()
        self._between = 0  # chunk boundaries passed

    def paused(self, delay: float) -> bool:
        self._between += 1
        if self._between > 1:  # the first text chunk is out
            self.gate.wait(WAIT_SEC)
        return super().paused(0)

    def let_go(self) -> None:
        self.gate.set()


HELD = Step(text="Counting: one two three four.", chunk_chars=10, chunk_delay=0.01)
"""A reply held after its first chunk."""

tool_gate = threading.Event()


@plait.tool
def lookup(key: str) -> str:
    """Look a key up (waits until the test lets it go)."""
    tool_gate.wait(WAIT_SEC)
    return f"{key}: found"


@pytest.fixture(autouse=True)
def _closed_tool_gate() -> Iterator[None]:
    tool_gate.clear()
    yield
    tool_gate.set()  # a call cut at the grace runs on in its thread: let it end


def runtime(stores: StoreFactory, server: ScriptedModelServer) -> Runtime:
    """A runtime on the factory's database, as one process opens it."""
    settings = ModelSettings(base_url=server.base_url, api_key="x", model="m", backoff_sec=0.01)
    return Runtime(stores.open(), RuntimeSettings(model=settings, tools=[lookup], lease_sec=60.0))


def stop(first: Runtime, grace_sec: float, let_go: Callable[[], None] | None = None) -> None:
    """Stop ``first`` as ``plait exec`` does on SIGTERM; with ``let_go``, once the stop is
    asked (``StopRequested``), let what runs end, within the grace."""
    stopping = threading.Thread(
        target=first.drain, args=(5.0,), kwargs={"grace_sec": grace_sec, "reason": REASON}
    )
    (session_id,) = first.owned
    seq = first.store.last_seq(session_id)
    stopping.start()
    if let_go is not None:
        wait_for_event(first.store, session_id, StopRequested, after=seq, timeout=WAIT_SEC)
        let_go()
    stopping.join(WAIT_SEC)
    assert not stopping.is_alive()
    first.close()


def streaming(session: plait.SessionHandle, text: str) -> str:
    """Submit ``text`` and return its task once its reply streams."""
    with session.subscribe() as feed:
        task = session.submit(text)
        while (item := feed.get(timeout=WAIT_SEC)) is not None:
            if isinstance(item, AgentMessageDelta):
                return task
    raise AssertionError(f"the reply of task {task} did not stream within {WAIT_SEC} s")


def go_on(stores: StoreFactory, server: ScriptedModelServer, session_id: str) -> None:
    """Another process goes on with the session, as ``plait exec --session S "go on"``."""
    with runtime(stores, server) as second:
        outcome = second.resume(session_id).run("go on", timeout=WAIT_SEC)
    assert outcome.ok and outcome.last_assistant_message == "Going on."


def assert_replays(store: EventStore, session_id: str) -> list[Event]:
    """Assert that the session verifies and replays clean, each of ``REPLAYS`` times (where
    what came from outside lands among the replayed program's events is a race of its own)."""
    assert store.verify(session_id).ok
    for _ in range(REPLAYS):
        result = replay(store, session_id, timeout=5)
        assert result.ok, result.divergence and result.divergence.message()
    events = store.read(session_id)
    assert_histories_valid(events)
    return events


def ends(events: list[Event], task: str) -> list[Event]:
    return [
        e for e in events if e.task_id == task and isinstance(e.body, TaskCompleted | TurnAborted)
    ]


def test_a_reply_that_ends_within_the_grace(durable_stores: StoreFactory) -> None:
    with HeldServer([HELD, Step(text="Going on.")]) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        task = streaming(session, "Count.")
        stop(first, LONG_GRACE_SEC, server.let_go)
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    kinds = [type(e.body) for e in events if e.task_id == task]
    assert StopRequested in kinds  # asked mid-reply; the task ended by itself first
    assert [type(e.body) for e in ends(events, task)] == [TaskCompleted]


def test_a_reply_cut_at_the_grace(durable_stores: StoreFactory) -> None:
    with HeldServer([HELD, Step(text="Going on.")]) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        task = streaming(session, "Count.")
        stop(first, SHORT_GRACE_SEC)
        server.let_go()
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    (cut,) = ends(events, task)
    assert isinstance(cut.body, TurnAborted) and cut.body.cause == "shutdown"


@pytest.mark.parametrize("grace_sec", [LONG_GRACE_SEC, SHORT_GRACE_SEC], ids=["ends", "cut"])
def test_a_tool_call_running(durable_stores: StoreFactory, grace_sec: float) -> None:
    script = [Step(tool_calls=[call("lookup", key="k")]), Step(text="Going on.")]
    with ScriptedModelServer(script) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        task = session.submit("Look it up.")
        wait_for_event(first.store, session.session_id, ToolCallStarted, timeout=WAIT_SEC)
        stop(first, grace_sec, tool_gate.set if grace_sec == LONG_GRACE_SEC else None)
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    (cut,) = ends(events, task)
    assert isinstance(cut.body, TurnAborted) and cut.body.cause == "shutdown"


def test_nothing_running(durable_stores: StoreFactory) -> None:
    with ScriptedModelServer([Step(text="Done."), Step(text="Going on.")]) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        assert session.run("Do it.", timeout=WAIT_SEC).ok
        stop(first, LONG_GRACE_SEC)
        go_on(durable_stores, server, session.session_id)
    assert_replays(durable_stores.open(), session.session_id)


@pytest.mark.parametrize("grace_sec", [LONG_GRACE_SEC, SHORT_GRACE_SEC], ids=["ends", "cut"])
def test_work_queued_behind_the_running_task(
    durable_stores: StoreFactory, grace_sec: float
) -> None:
    script = [HELD, Step(text="The queued one."), Step(text="Going on.")]
    with HeldServer(script) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        task = streaming(session, "Count.")
        queued = session.submit("Then this.")
        stop(first, grace_sec, server.let_go if grace_sec == LONG_GRACE_SEC else None)
        server.let_go()
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    assert StopRequested in [type(e.body) for e in events if e.task_id == task]
    started = [e.task_id for e in events if isinstance(e.body, TaskStarted)]
    assert started[:2] == [task, queued]  # the stop started nothing; the next process ran it


def test_a_stop_then_a_crash_of_the_next_process(durable_stores: StoreFactory) -> None:
    script = [
        HELD,
        Step(tool_calls=[call("lookup", key="k")]),  # the next process is killed in it
        Step(text="Going on."),
    ]
    with HeldServer(script) as server:
        first = runtime(durable_stores, server)
        session = first.start_session()
        streaming(session, "Count.")
        stop(first, LONG_GRACE_SEC, server.let_go)
        second = runtime(durable_stores, server)
        resumed = second.resume(session.session_id)
        resumed.submit("Look it up.")
        wait_for_event(second.store, session.session_id, ToolCallStarted, timeout=WAIT_SEC)
        crash(second, resumed)
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    assert [type(e.body) for e in events].count(SessionResumed) == 1


CLI_CASES = {
    "SIGINT": (signal.SIGINT, False, False),
    "SIGTERM": (signal.SIGTERM, False, False),
    "SIGINT-twice": (signal.SIGINT, True, False),
    "SIGTERM-twice-with-work-queued": (signal.SIGTERM, True, True),
}
"""Signal, whether a second one follows as the task stops, whether work waits behind it."""


def plait(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``plait ARGS`` in ``cwd`` as a user runs it (none of the test's ``PLAIT_`` or
    ``OPENAI_`` variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "OPENAI_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "plait", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("sig", "second", "queued"), list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_plait_exec_stopped_as_its_reply_streams_then_gone_on_with(
    tmp_path: Path, sig: signal.Signals, second: bool, queued: bool
) -> None:
    """The case as reported: a signal to ``plait exec`` while the reply streams, early enough
    that it ends within the grace; ``plait exec --session S "go on"``; ``plait replay S``.
    A second signal while the task stops exits at once: the next process ends it ``crashed``
    (and runs first what another process queued meanwhile)."""
    held = Step(text="Counting:\none two three.\n", chunk_chars=10, chunk_delay=0.01)
    script = [held, *([Step(text="The queued one.")] if queued else []), Step(text="Going on.")]
    with HeldServer(script) as server:
        (tmp_path / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "m"\nmax_attempts = 1\n'
        )
        first = plait(tmp_path, "exec", "--grace-sec", "60", "Count.")
        assert first.stdout is not None and first.stderr is not None
        assert first.stdout.readline() == "Counting:\n"  # the reply streams, and is held
        session = first.stderr.readline().split()[1]  # "session ID started (...)"
        db = tmp_path / ".plait" / "plait.db"
        if queued:  # through the inbox, from another process
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
            with Runtime(str(db), RuntimeSettings(model=settings, owner_id="front")) as front:
                before = front.store.last_seq(session)
                front.follow(session).submit("Then this.")
                wait_for_event(front.store, session, TaskEnqueued, after=before, timeout=WAIT_SEC)
        first.send_signal(sig)
        with SqliteStore(db) as store:
            asked = wait_for_event(store, session, StopRequested, timeout=WAIT_SEC)
        if second:
            first.send_signal(sig)
            first.wait(WAIT_SEC)
        server.let_go()
        _, err = first.communicate(timeout=WAIT_SEC)
        assert first.returncode == 128 + sig, err
        said = "stopped at once by a second signal" if second else f"task {asked.task_id} ended"
        assert said in err  # ended by itself, within the grace: not cut
        again = plait(tmp_path, "exec", "--session", session, "go on")
        out, err = again.communicate(timeout=WAIT_SEC)
        assert again.returncode == 0 and out.endswith("Going on.\n"), err
    for command in (["verify", session], ["replay", session]):
        done = plait(tmp_path, *command)
        out, err = done.communicate(timeout=WAIT_SEC)
        assert done.returncode == 0, out + err


def test_a_call_waiting_for_its_approval(durable_stores: StoreFactory) -> None:
    asked = threading.Event()

    def approver(request: plait.ApprovalRequest) -> plait.ApprovalDecision:
        asked.set()
        tool_gate.wait(WAIT_SEC)  # decides nothing before the stop
        return plait.ApprovalDecision(approved=False, reason="too late")

    script = [Step(tool_calls=[call("lookup", key="k")]), Step(text="Going on.")]
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        first = Runtime(
            durable_stores.open(),
            RuntimeSettings(
                model=settings,
                tools=[lookup],
                approval_policy="untrusted",
                approver=approver,
                lease_sec=60.0,
            ),
        )
        session = first.start_session()
        task = session.submit("Look it up.")
        assert asked.wait(WAIT_SEC)
        stop(first, LONG_GRACE_SEC)
        go_on(durable_stores, server, session.session_id)
    events = assert_replays(durable_stores.open(), session.session_id)
    (cut,) = ends(events, task)
    assert isinstance(cut.body, TurnAborted) and cut.body.cause == "shutdown"
