"""``kill -9`` a process while a function tool runs; the next process recovers the session.

A function tool that is not idempotent is answered ``unknown`` and never run again; an
idempotent one runs again in the process that recovers the session, and its result is recorded.
"""

from __future__ import annotations

import collections
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from scripted import assert_histories_valid

import plait
from plait.actors import ModelSettings, Session
from plait.events import TaskCompleted, ToolCallCompleted, ToolCallStarted, TurnAborted
from plait.events.stores import SqliteStore
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._recovery import UNKNOWN
from plait.testing import ScriptedModelServer, Step

CHILD = textwrap.dedent(
    """
    import asyncio, itertools, json, sys, threading
    import plait
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    db, tool = sys.argv[1:3]

    @plait.tool
    def charge(amount: int) -> str:
        '''Charge the customer.'''
        print("running charge", flush=True)
        threading.Event().wait()  # until the process is killed
        return "charged"

    @plait.tool(idempotent=True)
    async def sync_inventory(sku: str) -> str:
        '''Bring a product's stock count up to date.'''
        print("running sync_inventory", flush=True)
        await asyncio.Event().wait()
        return "synced"

    arguments = {"charge": {"amount": 5}, "sync_inventory": {"sku": "abc"}}[tool]
    step = Step(tool_calls=[ScriptedToolCall(tool, json.dumps(arguments))])
    ids = itertools.count(1)
    with ScriptedModelServer([step]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        runtime = Runtime(
            db,
            RuntimeSettings(
                model=settings, tools=[charge, sync_inventory],
                new_id=lambda: f"id-{next(ids)}", lease_sec=1.0,  # it dies: its lease lapses soon
            ),
        )
        runtime.start_session().run("go", timeout=120)
    """
)

ran: collections.Counter[str] = collections.Counter()


@plait.tool
def charge(amount: int) -> str:
    """Charge the customer."""
    ran["charge"] += 1
    return "charged"


@plait.tool(idempotent=True)
async def sync_inventory(sku: str) -> str:
    """Bring a product's stock count up to date."""
    ran["sync_inventory"] += 1
    return f"synced {sku}"


def kill_while_running(db: Path, tool: str) -> None:
    """Run the child until ``tool`` runs (it says so), then SIGKILL it."""
    SqliteStore(db).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), tool],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=60), "the tool never ran"
        assert child.stdout.readline().strip() == f"running {tool}"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    ("tool", "answer", "runs"),
    [("charge", (UNKNOWN, "unknown"), 0), ("sync_inventory", ("synced abc", "ok"), 1)],
)
def test_a_function_tool_cut_off_by_kill_9_is_run_again_only_if_idempotent(
    tmp_path: Path, tool: str, answer: tuple[str, str], runs: int
) -> None:
    db = tmp_path / "crash.db"
    kill_while_running(db, tool)
    ran.clear()
    with SqliteStore(db) as store:
        before = store.read("id-1")
        started = [e.body.server for e in before if isinstance(e.body, ToolCallStarted)]
        assert started == ["plait.functions"]
        with ScriptedModelServer([Step(text="back again")]) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
            with Runtime(
                store, RuntimeSettings(model=settings, tools=[charge, sync_inventory])
            ) as runtime:
                # Followed until the dead child's lease lapses, then taken over and recovered.
                after = runtime.resume("id-1").run("are you there?", timeout=60)
        events = store.read("id-1")
        assert store.verify("id-1").ok
        result = replay(store, "id-1", timeout=30)  # a bound on a wait, not a speed
    assert after.last_assistant_message == "back again"
    recovered = events[len(before) :]
    aborted = next(e.body for e in recovered if isinstance(e.body, TurnAborted))
    assert aborted.reason == "crashed"
    [completed] = [e.body for e in recovered if isinstance(e.body, ToolCallCompleted)]
    assert (completed.output, completed.outcome) == answer
    assert ran[tool] == runs  # never twice in all: the child's run was cut off
    assert sum(isinstance(e.body, TaskCompleted) for e in recovered) == 1
    assert_histories_valid(events)
    assert result.ok, result.divergence and result.divergence.message()


def test_what_the_recovery_records_before_the_session_starts_reaches_the_next_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "crash.db"
    kill_while_running(db, "sync_inventory")
    ran.clear()
    with SqliteStore(db) as store:
        after = store.read_all(limit=None)[-1].position
        rerun_recorded = threading.Event()

        def watch() -> None:
            with store.subscribe(after) as events:
                while (event := events.get(timeout=60)) is not None:
                    if isinstance(event.body, TurnAborted):  # the crashed task's end
                        rerun_recorded.set()
                        return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = Session.startup

        def startup_last(self: Session) -> None:
            # The worst order there is: the re-run answers, and the task ends, before the
            # session's thread starts its conversations from the log.
            assert rerun_recorded.wait(60), "the recovery recorded nothing"
            started(self)

        monkeypatch.setattr(Session, "startup", startup_last)
        with ScriptedModelServer([Step(text="back again")]) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
            with Runtime(
                store, RuntimeSettings(model=settings, tools=[charge, sync_inventory])
            ) as runtime:
                runtime.resume("id-1").run("are you there?", timeout=60)
            [request] = server.requests
        watcher.join(10)
        result = replay(store, "id-1", timeout=30)
    said = [m.get("content") for m in request.body["messages"]]
    assert "synced abc" in said, said  # the re-run's answer, as the crashed task left it
    assert result.ok, result.divergence and result.divergence.message()
