"""Supervision: a failure inside a running session never leaves its callers waiting.

Failures are real where they can be: a SQLite store that raises on a chosen event type (as a
full disk or a bug in a store would), a second writer that appends to the session's stream
mid-turn (a conflict), a session cut off mid tool call by a crash. A bug in an actor's start
has no real trigger: a patched step of it raises instead. Each case asserts what a user sees:
``run`` raises ``SessionFailedError`` within its timeout, naming what broke; feeds end; the
session closes; it resumes from its log.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from scripted import call, crash, runtime_for

import plait
from plait._errors import ConcurrencyError, SessionFailedError, StoreError
from plait.actors import GetQueue
from plait.actors._conversation import Conversation
from plait.actors._scheduler import Scheduler
from plait.actors.mcp import FunctionTool, McpServers
from plait.events import (
    AgentMessageDelta,
    Event,
    SessionClosed,
    SqliteStore,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.testing import ScriptedModelServer, Step

WAIT = 30.0
"""A bound on every wait: a hang fails the test instead of stalling it."""


class FailingStore(SqliteStore):
    """A SQLite store whose next write of an event of type ``kind`` raises ``error``; it
    writes ``ahead`` or only as each group is recorded (then the recording actor meets it)."""

    def __init__(self, path: Path, kind: str, error: Exception, ahead: bool = True) -> None:
        super().__init__(path)
        self.kind, self.error, self.armed = kind, error, True
        self.writes_ahead = ahead

    def _check(self, kinds: list[str]) -> None:
        if self.armed and self.kind in kinds:
            self.armed = False
            raise self.error

    def append(self, stream: str, events: Any, expected_seq: int, *, epoch: Any = None) -> Any:
        self._check([type(getattr(e, "body", e)).__name__ for e in events])
        return super().append(stream, events, expected_seq, epoch=epoch)

    def append_prepared(self, stream: str, prepared: Any, *, epoch: Any = None) -> Any:
        self._check([type(e.body).__name__ for e in prepared.events])
        return super().append_prepared(stream, prepared, epoch=epoch)


def kinds_of(events: list[Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


@pytest.mark.parametrize("ahead", [True, False], ids=["written-ahead", "written-at-once"])
def test_a_store_that_fails_a_write_fails_the_run_at_once_and_records_nothing(
    server: ScriptedModelServer, tmp_path: Path, ahead: bool
) -> None:
    server.push(Step(text="Lost."), Step(text="Resumed."))
    error = StoreError("disk full")
    store = FailingStore(tmp_path / "plait.db", "ModelResponded", error, ahead=ahead)
    with runtime_for(server, tmp_path, store=store) as runtime:
        session = runtime.start_session()
        with session.subscribe() as feed:
            with pytest.raises(SessionFailedError, match="disk full") as failed:
                session.run("hi", timeout=WAIT)
            assert failed.value.actor == "the store"
            assert "ModelResponded" in failed.value.handling
            assert isinstance(failed.value.cause, StoreError)
            with pytest.raises(SessionFailedError):  # the subscriber hears it too
                while feed.get(timeout=WAIT) is not None:
                    pass
        assert session.closed
        with pytest.raises(SessionFailedError):
            session.submit("more")
        recorded = runtime.store.read(session.session_id)
        assert kinds_of(recorded)[-1] == "ModelRequested"  # nothing after the failed write
    with runtime_for(server, tmp_path) as runtime:  # a new process: resumed as a crash is
        resumed = runtime.resume(session.session_id)
        outcome = resumed.run("again", timeout=WAIT)
        assert outcome.ok and outcome.last_assistant_message == "Resumed."
        ends = [e.body for e in runtime.store.read(session.session_id)]
        assert [(b.reason, b.cause) for b in ends if isinstance(b, TurnAborted)] == [
            ("crashed", "crash")
        ]


def test_a_session_that_breaks_as_it_is_closed_is_closed_without_an_error(
    server: ScriptedModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(Step(text="Done."), Step(text="Back."))
    receive = Scheduler.receive

    def broken(self: Scheduler, message: Any) -> Any:
        if isinstance(message, GetQueue):  # what ``close`` asks first
            raise RuntimeError("a bug")
        return receive(self, message)

    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("hi", timeout=WAIT).ok
        monkeypatch.setattr(Scheduler, "receive", broken)
        session.close(timeout=WAIT)
        assert session.closed
        with pytest.raises(SessionFailedError, match="the scheduler, handling GetQueue"):
            session.run("again", timeout=WAIT)
    monkeypatch.undo()
    with runtime_for(server, tmp_path) as runtime:
        assert runtime.resume(session.session_id).run("again", timeout=WAIT).ok


def test_an_actor_that_raises_fails_the_session_which_records_the_task_failed(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(text="Never kept."), Step(text="Back."))
    # A bug, not a StoreError, raised to the conversation as it records the reply.
    failing = RuntimeError("a bug")
    store = FailingStore(tmp_path / "plait.db", "ModelResponded", failing, ahead=False)
    with runtime_for(server, tmp_path, store=store) as runtime:
        session = runtime.start_session()
        with pytest.raises(SessionFailedError) as failed:
            session.run("hi", timeout=WAIT)
        error = failed.value
        assert error.actor == f"conversation {session.root_conversation_id}"
        assert error.handling.startswith("ModelFinished") and isinstance(error.cause, RuntimeError)
        assert "RuntimeError: a bug" in str(error)
        runtime.close()  # waits for the failure's record, and does not hang
        ends = [
            e for e in runtime.store.read(session.session_id) if isinstance(e.body, TurnAborted)
        ]
        assert [(e.body.reason, e.body.cause) for e in ends] == [("failed", "error")]
        assert "the session failed: conversation" in ends[0].body.detail
    with runtime_for(server, tmp_path) as runtime:
        resumed = runtime.resume(session.session_id)
        outcome = resumed.run("again", timeout=WAIT)
        assert outcome.ok and outcome.last_assistant_message == "Back."
        assert runtime.store.verify(session.session_id).ok


@pytest.mark.parametrize("ahead", [True, False], ids=["written-ahead", "written-at-once"])
def test_a_second_writer_mid_turn_fails_the_session_and_its_waiting_run(
    server: ScriptedModelServer, tmp_path: Path, ahead: bool
) -> None:
    server.push(Step(text="word " * 40, chunk_chars=5, chunk_delay=0.02), Step(text="Fine."))
    store = SqliteStore(tmp_path / "plait.db")
    store.writes_ahead = ahead
    with runtime_for(server, tmp_path, store=store) as runtime:
        session = runtime.start_session()
        with session.subscribe() as feed:
            ran: dict[str, BaseException] = {}

            def run() -> None:
                try:
                    session.run("hi", timeout=WAIT)
                except BaseException as exc:
                    ran["error"] = exc

            runner = threading.Thread(target=run)
            runner.start()
            while not isinstance(feed.get(timeout=WAIT), AgentMessageDelta):
                pass
            other = SqliteStore(tmp_path / "plait.db")  # another writer, mid-turn
            sid = session.session_id
            other.append(sid, [SessionClosed("another writer")], other.last_seq(sid))
            runner.join(WAIT)
            assert not runner.is_alive()
        assert isinstance(ran["error"], SessionFailedError)
        assert ran["error"].actor == "the store"
        assert isinstance(ran["error"].cause, ConcurrencyError)
        assert kinds_of(store.read(sid))[-1] == "SessionClosed"  # the other's: nothing after
    store.close()
    with runtime_for(server, tmp_path) as runtime:
        outcome = runtime.resume(sid).run("go on", timeout=WAIT)
        assert outcome.ok and outcome.last_assistant_message == "Fine."


def inventory_tool(hold: bool) -> FunctionTool:
    """An idempotent function tool (so a crash has it run again); ``hold``: it runs until its
    process stops."""

    @plait.tool(idempotent=True)
    async def sync_inventory(sku: str) -> str:
        """Bring a product's stock count up to date."""
        if hold:
            await asyncio.Event().wait()  # cancelled as the process stops
        return f"synced {sku}"

    return sync_inventory


@pytest.mark.parametrize("broken", ["the session", "the MCP pool"])
def test_an_actor_whose_start_raises_fails_the_session_at_once(
    server: ScriptedModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    server.push(Step(text="Started this time."))
    tools = [inventory_tool(hold=False)]  # the session has an MCP pool
    bug = RuntimeError("a bug")

    def fold(self: Any, events: Any) -> None:
        raise bug

    async def start(self: Any, lazy: Any = ()) -> None:
        raise bug

    with monkeypatch.context() as patched:
        if broken == "the session":  # it starts its conversations, which fold their past
            patched.setattr(Conversation, "_apply", fold)
        else:  # it starts the session's servers (here, the function tools')
            patched.setattr(McpServers, "start", start)
        with runtime_for(server, tmp_path, tools=tools) as runtime:
            session = runtime.start_session()
            with pytest.raises(SessionFailedError) as failed:
                session.run("hi", timeout=WAIT)
            assert (failed.value.actor, failed.value.handling) == (broken, "its start")
            assert failed.value.cause is bug
            assert session.closed
    with runtime_for(server, tmp_path, tools=tools) as runtime:
        outcome = runtime.resume(session.session_id).run("again", timeout=WAIT)
        assert outcome.ok and outcome.last_assistant_message == "Started this time."


def test_a_recovery_that_breaks_fails_the_session_which_records_the_task_failed(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(tool_calls=[call("sync_inventory", sku="abc")]))
    runtime = runtime_for(server, tmp_path, tools=[inventory_tool(hold=True)])
    session = runtime.start_session()
    with session.subscribe(transient=False) as feed:  # before the submit: nothing is missed
        sid, task = session.session_id, session.submit("sync the stock")
        while not isinstance(getattr(feed.get(timeout=WAIT), "body", None), ToolCallStarted):
            pass
    crash(runtime, session)  # the process dies while the call runs
    # Resumed, the call runs again; recording its answer raises (a bug, not a StoreError).
    bug = RuntimeError("a bug")
    store = FailingStore(tmp_path / "plait.db", "ToolCallCompleted", bug, ahead=False)
    tools = [inventory_tool(hold=False)]
    with runtime_for(server, tmp_path, store=store, tools=tools) as runtime:
        resumed = runtime.resume(sid)
        with pytest.raises(SessionFailedError) as failed:
            resumed.run("are you there?", timeout=WAIT)
        assert failed.value.actor == f"the recovery of task {task}"
        assert failed.value.handling == "ToolFinished" and failed.value.cause is bug
        runtime.close()  # waits for the failure's record
        ended = [e.body for e in store.read(sid) if e.task_id == task]
        answers = [b.outcome for b in ended if isinstance(b, ToolCallCompleted)]
        assert answers == ["unknown"]  # it may have run again: not run a third time
        assert isinstance(ended[-1], TurnAborted)
        assert (ended[-1].reason, ended[-1].cause) == ("failed", "error")
    store.close()
    server.push(Step(text="Back."), Step(text="Back."))  # one for a task queued before
    with runtime_for(server, tmp_path, tools=tools) as runtime:
        outcome = runtime.resume(sid).run("go on", timeout=WAIT)
        assert outcome.ok and outcome.last_assistant_message == "Back."


WRAPPER = textwrap.dedent(
    """
    import sys
    import plait.events.stores._sqlite as sqlite
    from plait._errors import StoreError

    class FailingStore(sqlite.SqliteStore):
        '''Its writes of ModelResponded fail, as a full disk's would.'''

        def append_prepared(self, stream, prepared, *, epoch=None):
            if any(type(e.body).__name__ == "ModelResponded" for e in prepared.events):
                raise StoreError("disk full")
            return super().append_prepared(stream, prepared, epoch=epoch)

    sqlite.SqliteStore = FailingStore  # what plait exec opens
    from plait.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_plait_exec_says_in_one_line_that_the_session_failed_and_exits_1(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(Step(text="An answer that is shown."))
    (tmp_path / "plait.toml").write_text(
        f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
    )
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
    done = subprocess.run(
        [sys.executable, "wrapper.py", "exec", "hi"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "An answer that is shown.",
        "[the answer above was not recorded: the session failed]",
    ]
    problems = [line for line in done.stderr.splitlines() if not line.startswith("session ")]
    assert len(problems) == 1 and problems[0].startswith("plait: session "), done.stderr
    assert "failed: the store, handling the write of ModelResponded" in problems[0]
    assert "StoreError: disk full" in problems[0]
