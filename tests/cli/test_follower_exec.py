"""``plait exec --session S`` while another process runs S (docs/processes.md#following): a
real ``plait worker`` owns S, the follower is another real ``plait`` process. It submits its
task through the owner's inbox at once, whatever MCP servers its configuration names (the
owner runs them), prints its own task's answer as the owner records it, and exits with its
task's outcome, on both stores."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import StoreFactory

from plait.actors.model import ModelSettings
from plait.events import Event, TaskCompleted, TaskEnqueued, TaskStarted, TurnAborted
from plait.events.subscription import Subscription
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli, Running

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"

MCP = f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{TEST_SERVER}", "stdio"]\n'
"""An MCP server in the project's configuration: the worker runs it, the follower must not
wait for it."""

EXITS_WITHIN_SEC = 30.0
"""What a follower's exec is given to exit: less than the 40 s it waited for servers it does
not run before the fix (a bound on a hang, not a measure of speed)."""


@pytest.fixture
def front(durable_stores: StoreFactory, server: ScriptedModelServer) -> Iterator[Runtime]:
    """A front end's runtime on the test's store: it starts sessions and submits to them, and
    leaves the running to the worker."""
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
    store = durable_stores.open()
    with Runtime(store, model=settings, owner_id="front", expire_every_sec=None) as runtime:
        yield runtime


def owned_by_a_worker(cli: Cli, front: Runtime, first: str) -> tuple[str, Running]:
    """Start a session, hand it to a new ``plait worker`` by submitting task ``first`` from
    the front end; return the session and the worker, which owns it once ``first`` ran."""
    started = front.start_session()
    session = started.session_id
    assert started.release(10)  # nobody owns it: the worker takes it when work comes
    worker = cli.spawn("worker")
    assert worker.err.next().startswith("worker ")
    outcome = front.follow(session).run(first, timeout=60)
    assert outcome.ok, outcome
    lease = front.store.lease(session)
    assert lease is not None and lease.live and lease.owner != "front"
    return session, worker


def next_of(tail: Subscription, session: str, kind: type, after: int = 0) -> Event:
    """The next event of ``kind`` in ``session`` past seq ``after`` that the subscription
    ``tail`` gets."""
    while (event := tail.get(timeout=30)) is not None:
        if event.stream == session and isinstance(event.body, kind) and event.seq > after:
            return event
    raise AssertionError(f"no {kind.__name__} in session {session} within 30 s")


def exited(running: Running) -> tuple[int, str, list[str]]:
    """Wait for ``running`` to exit by itself: its code, stdout and stderr lines; kill it and
    fail if it has not within ``EXITS_WITHIN_SEC``."""
    try:
        code = running.process.wait(EXITS_WITHIN_SEC)
    except subprocess.TimeoutExpired:
        running.process.kill()
        said = "".join(running.err.rest())
        raise AssertionError(f"exec still ran after {EXITS_WITHIN_SEC:g} s:\n{said}") from None
    return code, "".join(running.out.rest()), running.err.rest()


def stopped(worker: Running) -> None:
    """Stop the worker as an operator does."""
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 143


def test_a_follower_exec_submits_at_once_whatever_servers_its_config_names(
    cli: Cli, durable_stores: StoreFactory, server: ScriptedModelServer, front: Runtime
) -> None:
    cli.configure(server.base_url, f'[store]\nurl = "{durable_stores.url}"\n{MCP}')
    server.push(Step(text="First."), Step(text="Hello there."), Step(status=500))
    session, worker = owned_by_a_worker(cli, front, "first")
    try:
        code, _, said = exited(cli.spawn("exec", "--session", session, "hello"))
        assert code == 0, said
        assert said[0].startswith(f"session {session} followed (run by "), said
        *_, done = [e for e in front.store.read(session) if isinstance(e.body, TaskCompleted)]
        assert done.body.last_assistant_message == "Hello there."

        # The task fails there: the follower exits as the owner's exec would, with one line.
        code, answer, said = exited(cli.spawn("exec", "--session", session, "fail"))
        assert (code, answer) == (1, ""), said
        assert said[-1].startswith("plait: ") and "scripted error" in said[-1], said
    finally:
        stopped(worker)
    (ended,) = [e.body for e in front.store.read(session) if isinstance(e.body, TurnAborted)]
    assert ended.model_error is not None


def test_a_follower_exec_prints_its_own_tasks_answer_and_no_other(
    cli: Cli, durable_stores: StoreFactory, server: ScriptedModelServer, front: Runtime
) -> None:
    cli.configure(server.base_url, f'[store]\nurl = "{durable_stores.url}"\n')
    other = Step(text="Not yours. ", endless=True)  # runs until it is interrupted
    server.push(Step(text="First."), other, Step(text="Second,\nin two lines."))
    session, worker = owned_by_a_worker(cli, front, "first")
    followed = front.follow(session)
    try:
        with front.store.subscribe() as tail:
            running = followed.submit("the other task")
            past = front.store.last_seq(session)
            began = next_of(tail, session, TaskStarted, past)  # it streams, and never ends
            assert began.task_id == running
            second = cli.spawn("exec", "--session", session, "second task")
            mine = next_of(tail, session, TaskEnqueued, began.seq)
            followed.interrupt()  # the other task ends; the follower's runs
            code, answer, said = exited(second)
    finally:
        stopped(worker)
    assert code == 0, said
    assert said[0].startswith(f"session {session} followed (run by "), said
    assert answer == "Second,\nin two lines.\n", said
    events = front.store.read(session)
    (done,) = [e for e in events if e.task_id == mine.task_id and isinstance(e.body, TaskCompleted)]
    assert done.body.last_assistant_message == "Second,\nin two lines."
