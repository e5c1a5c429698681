"""``plait worker --concurrency N`` counts tasks running, not sessions owned
(docs/processes.md#capacity): a real worker process, sessions submitted to by a front end that
never runs them (``Runtime.follow``), the model a ``ScriptedModelServer``."""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING

from support import StoreFactory

from plait.actors import ModelSettings
from plait.cli._parser import build_parser
from plait.cli._worker import ACTIVE_PER_SLOT, active_sessions
from plait.events import Event, TaskCompleted, TaskEnqueued, TaskStarted
from plait.runtime import Runtime, RuntimeSettings, SessionHandle
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

SESSIONS, TASKS, PLACES = 6, 2, 2
REPLY = Step(text="half a second " * 5, chunk_chars=7, chunk_delay=0.05)
"""A reply that streams for about half a second: tasks overlap when places allow."""


def most_running_at_once(events: list[Event]) -> int:
    """The most tasks the log shows started and not yet completed, in the order the store
    committed them (every process's events in one order)."""
    running = most = 0
    for event in events:
        if isinstance(event.body, TaskStarted):
            running += 1
            most = max(most, running)
        elif isinstance(event.body, TaskCompleted):
            running -= 1
    return most


async def run_all(handles: list[SessionHandle]) -> list[str]:
    """Every session's tasks, one after the other in each, all sessions at once."""

    async def session(handle: SessionHandle) -> list[str]:
        return [(await handle.arun(f"task {i}", timeout=90)).status for i in range(TASKS)]

    statuses = await asyncio.gather(*(session(handle) for handle in handles))
    return [status for each in statuses for status in each]


def test_one_worker_runs_at_most_concurrency_tasks_at_once_over_many_sessions(
    cli: Cli, durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(*[REPLY] * (SESSIONS * TASKS))
    store = durable_stores.open()
    url = durable_stores.url
    cli.configure(server.base_url, f'[store]\nurl = "{url}"\n')
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
    with Runtime(
        store, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
    ) as front:
        ids = []
        for _ in range(SESSIONS):
            started = front.start_session()
            assert started.release(10)  # nobody owns it: the worker takes it when work comes
            ids.append(started.session_id)
        worker = cli.spawn("worker", "--concurrency", str(PLACES))
        try:
            statuses = asyncio.run(run_all([front.follow(sid) for sid in ids]))
        finally:
            _, err = worker.stop(signal.SIGTERM)
        assert statuses == ["completed"] * (SESSIONS * TASKS), err
        events = [e for e in store.read_all(0, limit=None) if e.stream in set(ids)]
    enqueued = [e.task_id for e in events if isinstance(e.body, TaskEnqueued)]
    completed = [e.task_id for e in events if isinstance(e.body, TaskCompleted)]
    assert len(enqueued) == SESSIONS * TASKS and sorted(completed) == sorted(enqueued)
    # Never more than its places at once, and the places were used: work, not ownership.
    assert most_running_at_once(events) == PLACES, err


def test_a_worker_keeps_more_sessions_with_actors_than_it_runs_tasks() -> None:
    def active(*argv: str) -> int | None:
        return active_sessions(build_parser().parse_args(["worker", *argv]))

    assert active("--concurrency", "8") == ACTIVE_PER_SLOT * 8
    assert active("--concurrency", "8", "--max-active-sessions", "10") == 10
    assert active() is None  # no bound on tasks: none on sessions either
