"""An owner id tells a process of the same machine whether its owner still runs; a session
held by a dead one is taken over at once, whichever way it is taken (resume, adopt, a
followed handle), on every backend (docs/processes.md#a-dead-owner-on-this-machine).

The owners are real processes: a child that made its id and exited, or one still running. Both
schemes (``PROC``, ``PSUTIL``) are checked on Linux: each makes, in this process, the id of
this process or of a running child, and reads it back."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from plait.actors import ModelSettings
from plait.events import EventStore
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._liveness import PROC, PSUTIL, Scheme, owner_state, scheme
from plait.testing import ScriptedModelServer, Step

MAKE_ID = (
    "import sys\n"
    "from plait.runtime._ownership import default_owner_id\n"
    "print(default_owner_id(), flush=True)\n"
    "sys.stdin.read()\n"  # runs until the test closes its stdin
)


@contextlib.contextmanager
def child() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running process and the owner id it made; it ends when the block does."""
    process = subprocess.Popen(
        [sys.executable, "-c", MAKE_ID], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        yield process, process.stdout.readline().strip()
    finally:
        if process.returncode is None:
            process.kill()
        process.communicate(timeout=30)


def dead_id() -> str:
    """The owner id of a process that ran on this machine and has exited."""
    with child() as (process, owner):
        process.kill()
        process.wait(timeout=30)
    return owner


def id_of(pid: int, made_by: Scheme) -> str:
    """The owner id of process ``pid`` of this machine, as ``made_by`` makes it."""
    proof = made_by.proof(pid)
    assert proof is not None
    return f"{socket.gethostname()}:{pid}:ab12cd:{proof}"


def test_an_owner_id_says_host_and_pid_first_and_this_process_is_live() -> None:
    with child() as (process, owner):
        host, pid, _, proof = owner.split(":")
        assert (host, int(pid)) == (socket.gethostname(), process.pid)
        assert owner_state(owner) == "live"
        where, start = proof.split(".")
        assert len(where) == 8 and start.isdigit()
        # Linux has /proc: the child's id is PROC's, and this process reads the same start.
        assert scheme() is PROC and PROC.proof(process.pid) == proof


def test_a_killed_owner_is_dead_and_so_is_an_unreaped_one() -> None:
    assert owner_state(dead_id()) == "dead"
    with child() as (process, owner):
        process.kill()
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        assert owner_state(owner) == "dead"  # a zombie runs nothing


def test_a_pid_used_again_by_a_later_process_is_not_the_owner() -> None:
    with child() as (process, owner):
        head, proof = owner.rsplit(":", 1)
        where, start = proof.split(".")
        # The same pid, started at another time: what the id of the pid's former holder reads.
        assert owner_state(f"{head}:{where}.{int(start) - 1}") == "dead"
        assert owner_state(owner) == "live"
        process.send_signal(signal.SIGSTOP)  # a paused owner is alive: its lease must lapse
        os.waitid(os.P_PID, process.pid, os.WSTOPPED | os.WNOWAIT)
        assert owner_state(owner) == "live"
        process.send_signal(signal.SIGCONT)


SCHEMES = [pytest.param(PROC, id="proc"), pytest.param(PSUTIL, id="psutil")]


@pytest.mark.parametrize("made_by", SCHEMES)
def test_each_scheme_tells_this_process_live_and_a_pid_used_again_dead(made_by: Scheme) -> None:
    owner = id_of(os.getpid(), made_by)
    assert made_by.owner_state(owner) == "live"
    head, proof = owner.rsplit(":", 1)
    where, start = proof.split(".")
    # The same pid, started at another time: what the id of the pid's former holder reads.
    assert made_by.owner_state(f"{head}:{where}.{int(start) - 1}") == "dead"
    assert made_by.owner_state(f"{head}:{int(where, 16) ^ 1:08x}.{start}") == "elsewhere"


@pytest.mark.parametrize("made_by", SCHEMES)
def test_each_scheme_tells_a_running_child_from_an_ended_one(made_by: Scheme) -> None:
    with child() as (process, _):
        owner = id_of(process.pid, made_by)  # made here, while it runs
        assert made_by.owner_state(owner) == "live"
        process.send_signal(signal.SIGSTOP)  # a paused owner is alive: its lease must lapse
        os.waitid(os.P_PID, process.pid, os.WSTOPPED | os.WNOWAIT)
        assert made_by.owner_state(owner) == "live"
        process.kill()
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        assert made_by.owner_state(owner) == "dead"  # a zombie runs nothing
        process.wait(timeout=30)
        assert made_by.owner_state(owner) == "dead"


def test_neither_scheme_takes_the_others_ids_for_its_own() -> None:
    for made_by, reader in ((PROC, PSUTIL), (PSUTIL, PROC)):
        assert reader.owner_state(id_of(os.getpid(), made_by)) == "elsewhere"


@pytest.mark.parametrize(
    "owner",
    [
        "web1:4242:ab12cd",  # made by an older plait: no proof of where it runs
        "worker-1",  # RuntimeSettings(owner_id=)
        "web1:0:ab12cd:00000000.1",  # pid 0 names no process
    ],
)
def test_an_owner_id_that_does_not_say_where_it_runs_counts_as_alive(owner: str) -> None:
    assert owner_state(owner) == "unknown"


def test_an_owner_on_another_machine_counts_as_alive() -> None:
    head, proof = dead_id().rsplit(":", 1)
    where, start = proof.split(".")
    other = f"{int(where, 16) ^ 1:08x}"
    assert owner_state(f"{head}:{other}.{start}") == "elsewhere"


@contextlib.contextmanager
def runtime(store: EventStore, server: ScriptedModelServer) -> Iterator[Runtime]:
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
    with Runtime(
        store, RuntimeSettings(model=settings, owner_id="b", expire_every_sec=None)
    ) as opened:
        yield opened


def held_by(store: EventStore, server: ScriptedModelServer, owner: str) -> str:
    """A session whose lease ``owner`` holds for 60 s (taken after its first owner handed
    it back: epoch 2)."""
    with runtime(store, server) as first:
        session = first.start_session()
        assert session.run("hello", timeout=30).ok
    lease = store.leases.acquire(session.session_id, owner, 60)
    assert lease.held_by(owner) and lease.live and lease.epoch == 2
    return session.session_id


def test_resume_takes_a_dead_owners_session_at_once_and_fences_it(
    store: EventStore, server: ScriptedModelServer
) -> None:
    server.push(Step(text="hi"), Step(text="mine now"))
    owner = dead_id()
    session = held_by(store, server, owner)
    with runtime(store, server) as b:
        handle = b.resume(session)
        assert not handle.followed
        lease = store.leases.get(session)
        assert lease is not None and (lease.owner, lease.epoch) == ("b", 3)
        assert handle.run("there?", timeout=30).last_assistant_message == "mine now"
    assert store.verify(session).ok


def test_adopt_takes_a_dead_owners_session_and_leaves_a_live_ones(
    store: EventStore, server: ScriptedModelServer
) -> None:
    server.push(Step(text="hi"), Step(text="hi"))
    with child() as (_, live):
        alive = held_by(store, server, live)
        dead = held_by(store, server, dead_id())
        with runtime(store, server) as b:
            assert b.adopt() == [dead]
            assert b.resume(alive).followed


def test_a_followed_session_is_taken_over_as_soon_as_its_owner_dies(
    store: EventStore, server: ScriptedModelServer
) -> None:
    server.push(Step(text="hi"), Step(text="taken over"))
    with child() as (process, owner):
        session = held_by(store, server, owner)
        with runtime(store, server) as b:
            handle = b.resume(session)
            assert handle.followed
            process.kill()
            process.wait(timeout=30)
            # Its lease has 60 s left; the task runs once the follower sees its owner dead.
            outcome = handle.run("there?", timeout=30)
            assert outcome.ok and outcome.last_assistant_message == "taken over"
            assert not handle.followed
