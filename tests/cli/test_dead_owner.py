"""A dead owner on this machine is known dead (docs/processes.md#a-dead-owner-on-this-machine).

A real child process owns a session with a 60 s lease and a task in flight. Killed with
SIGKILL, its session is recovered by ``plait recover`` at once, not 60 s later; alive, it is
left to it, and ``plait recover`` says whose it is and how long its lease has left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import TYPE_CHECKING

from support import wait_for_event

from plait.events import ModelRequested, SqliteStore, TaskCompleted, TaskEnqueued, TurnAborted
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

OWNER = textwrap.dedent(
    """
    import sys
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings

    db, base_url = sys.argv[1:3]
    settings = ModelSettings(base_url=base_url, api_key="k", model="scripted-model")
    # A lease far longer than the test waits.
    runtime = Runtime(db, RuntimeSettings(model=settings, lease_sec=60.0))
    session = runtime.start_session()
    print(session.session_id, runtime.owner.id, flush=True)
    session.submit("first")  # streams until the test is done with it
    session.run("second", timeout=300)  # waits behind it
    """
)

ENDLESS = Step(text="slow " * 2000, chunk_chars=5, chunk_delay=0.1)
"""A reply that streams for minutes: the task is in flight for as long as the test needs."""


@contextlib.contextmanager
def owner(cli: Cli, server: ScriptedModelServer) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A process that owns a session whose first task is in flight (its model request is
    recorded and sent) and whose second waits behind it (enqueued: a kill before that would
    leave no task waiting); yields it and the session's id, and kills it at the end if alive."""
    cli.store.parent.mkdir(exist_ok=True)
    server.push(ENDLESS)
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(cli.store), server.base_url],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        session, owner_id = process.stdout.readline().split()
        assert owner_id.startswith(f"{socket.gethostname()}:{process.pid}:")
        with SqliteStore(cli.store) as store:
            wait_for_event(store, session, ModelRequested)
            first = wait_for_event(store, session, TaskEnqueued)
            wait_for_event(store, session, TaskEnqueued, after=first.seq)  # "second", behind it
        server.wait_for_requests(1, timeout=60)
        yield process, session
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)  # and close its pipe


def test_recover_takes_a_killed_owners_session_at_once(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    with owner(cli, server) as (process, session):
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        with SqliteStore(cli.store) as store:
            lease = store.leases.get(session)
        assert lease is not None and lease.live  # 60 s left by the store's clock
        server.push(Step(text="Recovered."))
        result = cli("recover")
    assert result.returncode == 0, result.stderr
    with SqliteStore(cli.store) as store:
        assert store.verify(session).ok
        events = store.read(session)
        lease = store.leases.get(session)
    assert lease is not None and lease.epoch == 2  # taken from the dead owner: fenced
    (crashed,) = [e for e in events if isinstance(e.body, TurnAborted)]
    assert crashed.body.reason == "crashed"
    row = f"{session}  task {crashed.task_id} crashed, 1 waiting: resumed"
    assert result.stdout.splitlines() == [row]
    assert result.stderr.endswith("recovered 1 session\n")
    assert sum(isinstance(e.body, TaskCompleted) for e in events) == 1  # the waiting task ran
    history = [json.loads(line) for line in cli("history", session, "--json").stdout.splitlines()]
    assert history[-1]["content"] == "Recovered."
    replayed = cli("replay", session)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_recover_leaves_a_live_owners_session_and_says_whose_it_is(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    with owner(cli, server) as (process, session):
        with SqliteStore(cli.store) as store:
            lease = store.leases.get(session)
        assert lease is not None and lease.owner is not None
        text = cli("recover")
        rows = cli("recover", "--json")
        assert process.poll() is None  # still running its task
    assert text.returncode == 0, text.stderr
    (line,) = text.stdout.splitlines()
    head, left = line.split(" s left")[0].rsplit("lease ", 1)
    assert head == f"{session}  left: owned by {lease.owner} (live), "
    assert 0 < float(left) <= 60
    assert text.stderr.endswith("recovered 0 sessions, left 1 to their owners\n")
    (row,) = [json.loads(line) for line in rows.stdout.splitlines()]
    assert {k: v for k, v in row.items() if k != "lease_remaining_sec"} == {
        "session_id": session,
        "left": True,
        "owner": lease.owner,
        "owner_process": "live",
    }
    assert 0 < row["lease_remaining_sec"] <= 60


def test_exec_on_a_killed_owners_session_resumes_it_at_once(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    with owner(cli, server) as (process, session):
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        server.push(Step(text="Second."), Step(text="Going on."))
        result = cli("exec", "--session", session, "go on")
    assert result.returncode == 0, result.stderr
    assert f"session {session} resumed" in result.stderr  # not followed: its owner is dead
    assert result.stdout.splitlines()[-1] == "Going on."  # after the one waiting behind the crash
    with SqliteStore(cli.store) as store:
        assert store.verify(session).ok
