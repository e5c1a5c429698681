"""A release is a release (docs/processes.md#handing-back): a session handed back with
work waiting is taken over by another process at once, while the process that released it
lives on and its heartbeat keeps renewing the leases it still holds."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from support import StoreFactory, process
from support import wait_for_event as wait_for

from plait.events import ModelRequested, TaskCompleted, TurnAborted
from plait.testing import ScriptedModelServer, Step

LEASE_SEC = 20.0
"""The releasing process's lease: a takeover that waited for a lapse would take this long."""

SLOW = Step(text="slow " * 400, chunk_chars=5, chunk_delay=0.1)
"""A reply that takes 40 s: it is still streaming when the session is handed back."""


@contextlib.contextmanager
def worker(stores: StoreFactory, server: ScriptedModelServer, cwd: Path) -> Iterator[None]:
    """``plait worker`` on the store, in a process of its own; stopped with SIGTERM."""
    (cwd / "plait.toml").write_text(f'[model]\nbase_url = "{server.base_url}"\nmodel = "m"\n')
    url = stores.url
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
    args = ["worker", "--store", url, "--lease-sec", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "plait", *args],
        cwd=cwd,
        env={**env, "OPENAI_API_KEY": "k"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        assert process.returncode == 143, err


def test_a_session_released_with_work_waiting_is_taken_over_while_its_releaser_lives(
    durable_stores: StoreFactory, server: ScriptedModelServer
) -> None:
    server.push(SLOW, Step(text="run by b"))
    with (
        process(durable_stores, server, "a", lease_sec=LEASE_SEC) as a,
        process(durable_stores, server, "b") as b,
    ):
        kept = a.start_session()  # a holds this one still: its heartbeat has work to do
        session = a.start_session()
        sid = session.session_id
        cut = session.submit("Take your time.")
        wait_for(a.store, sid, ModelRequested)
        waiting = session.submit("And then this.")  # acknowledged: its TaskEnqueued is durable
        assert not session.release(timeout=30, grace_sec=0.1)  # handed back, work waiting
        # One heartbeat round of a, now rather than in a third of LEASE_SEC: it renews the
        # lease a still holds, and not the one it released.
        assert a.owner.still_owns(kept.session_id) and not a.owner.still_owns(sid)
        lease = a.store.leases.get(sid)
        assert lease is not None and lease.held_by("a") and not lease.live
        assert b.adopt() == [sid]
        ended = wait_for(a.store, sid, TaskCompleted)  # b took it at once: it was not live
        assert ended.task_id == waiting
        assert ended.body.last_assistant_message == "run by b"
        aborted = [e for e in a.store.read(sid) if isinstance(e.body, TurnAborted)]
        assert [(e.task_id, e.body.cause) for e in aborted] == [(cut, "shutdown")]
        lease = a.store.leases.get(sid)
        assert lease is not None and lease.owner == "b" and lease.epoch == 2
        assert a.owner.still_owns(kept.session_id) and not a.owner.still_owns(sid)
        lease = a.store.leases.get(sid)
        assert lease is not None and lease.owner == "b" and lease.live
        assert a.store.verify(sid).ok


def test_a_worker_takes_over_what_a_drained_process_left_waiting_while_it_lives(
    durable_stores: StoreFactory, server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(SLOW, Step(text="run by the worker"))
    with process(durable_stores, server, "a", lease_sec=LEASE_SEC) as a:
        session = a.start_session()
        sid = session.session_id
        session.submit("Take your time.")
        wait_for(a.store, sid, ModelRequested)
        waiting = session.submit("And then this.")
        a.drain(grace_sec=0.1)  # handed back, work waiting; a lives on, its heartbeat too
        assert not a.owner.still_owns(sid)  # a heartbeat round now: it renews nothing
        lease = a.store.leases.get(sid)
        assert lease is not None and not lease.live  # lapsed now, not in LEASE_SEC
        with worker(durable_stores, server, tmp_path):
            # Well before the lease would have lapsed had it been left to: taken over at once.
            ended = wait_for(a.store, sid, TaskCompleted, timeout=LEASE_SEC / 2)
        assert ended.task_id == waiting and ended.body.last_assistant_message == "run by the worker"
        lease = a.store.leases.get(sid)
        assert lease is not None and lease.epoch == 2  # the worker's, handed back as it stopped
