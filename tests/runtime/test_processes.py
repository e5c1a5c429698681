"""Several real processes on one store (SQLite file, PostgreSQL schema): concurrent
submitters, an owner killed with SIGKILL and taken over by ``plait worker``, an owner paused
with SIGSTOP whose appends are refused once it wakes (docs/processes.md)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted import assert_histories_valid, call
from support import StoreFactory
from support import wait_for_event as wait_for

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    Event,
    EventStore,
    ModelRequested,
    SessionResumed,
    TaskCompleted,
    TaskEnqueued,
    TaskStarted,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.stores import open_store
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"

OWNER = textwrap.dedent(
    """
    import json, sys
    from plait.actors.mcp._config import McpServerConfig
    from plait.actors._model import ModelSettings
    from plait._errors import PlaitError
    from plait.runtime import Runtime, RuntimeSettings

    url, base_url, server_py, counter, prompt = sys.argv[1:6]
    mcp = {"t": McpServerConfig(
        command=sys.executable, args=[server_py, "stdio"], env={"PLAIT_TEST_COUNTER": counter}
    )}
    settings = ModelSettings(base_url=base_url, api_key="k", model="m")
    runtime = Runtime(
        url, RuntimeSettings(model=settings, mcp_servers=mcp, lease_sec=1.0, owner_id="doomed")
    )
    session = runtime.start_session()
    print(session.session_id, flush=True)
    try:
        outcome = session.run(prompt, timeout=120)
        print(json.dumps({"ok": outcome.ok}), flush=True)
    except PlaitError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        sys.exit(3)
    """
)


def url_of(stores: StoreFactory) -> str:
    stores.open()  # creates the schema's tables
    return stores.url


def configure(tmp_path: Path, base_url: str, counter: Path) -> Path:
    """A directory whose ``plait.toml`` points at the model server and the MCP server."""
    (tmp_path / "plait.toml").write_text(
        f'[model]\nbase_url = "{base_url}"\nmodel = "m"\n'
        f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{SERVER}", "stdio"]\n'
        f'env = {{ PLAIT_TEST_COUNTER = "{counter}" }}\n'
    )
    return tmp_path


def plait(cwd: Path, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
    env["OPENAI_API_KEY"] = "k"
    return subprocess.Popen(
        [sys.executable, "-m", "plait", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


@contextlib.contextmanager
def worker(cwd: Path, url: str) -> Iterator[subprocess.Popen[str]]:
    """``plait worker`` on ``url``; SIGTERM stops it at the end (``--drain-sec`` is the old
    name of ``--grace-sec``: both are taken)."""
    process = plait(cwd, "worker", "--store", url, "--lease-sec", "1", "--drain-sec", "10")
    try:
        yield process
    finally:
        if process.returncode is None:  # not stopped by the test
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
            assert process.returncode == 143, err
            assert "plait: worker stopped by SIGTERM" in err


@contextlib.contextmanager
def owner(url: str, base_url: str, counter: Path, prompt: str) -> Iterator[subprocess.Popen[str]]:
    """A process that starts a session and runs ``prompt`` in it; killed at the end if alive."""
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, url, base_url, str(SERVER), str(counter), prompt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=30)  # and close its pipes


def pause(process: subprocess.Popen[str], stores: StoreFactory) -> None:
    """Stop ``process`` (SIGSTOP) between two of its write transactions. On SQLite, a process
    stopped inside one keeps the file's write lock until it wakes (docs/processes.md), so this
    holds the lock itself until the process has stopped. On PostgreSQL, each write a running
    owner makes (an append, a renewal) is one statement, which the server finishes alone."""
    with contextlib.ExitStack() as held:
        if stores.backend == "sqlite":
            db = held.enter_context(contextlib.closing(sqlite3.connect(stores.path, timeout=30)))
            db.isolation_level = None
            db.execute("BEGIN IMMEDIATE")
            held.callback(db.execute, "ROLLBACK")
        os.kill(process.pid, signal.SIGSTOP)
        _, status = os.waitpid(process.pid, os.WUNTRACED)  # until it has stopped
        assert os.WIFSTOPPED(status), status


def ran(counter: Path, timeout: float = 30.0) -> None:
    """Wait until ``bump`` has counted an execution in ``counter``."""
    deadline = time.monotonic() + timeout
    while not counter.read_text():
        assert time.monotonic() < deadline, "the call never ran"
        select.select([], [], [], 0.01)  # the file has no event to wait on: look again soon


def assert_clean(store: EventStore, stream: str) -> list[Event]:
    """The log is one chain that verifies and replays clean; every task ran once at a time."""
    assert store.verify(stream).ok
    result = replay(store, stream, timeout=10)
    assert result.ok, result.divergence and result.divergence.message()
    events = store.read(stream)
    assert_histories_valid(events)
    running = None
    for event in events:  # one task at a time: no interleaving of two owners' tasks
        if isinstance(event.body, TaskStarted):
            assert running is None, f"task {event.task_id} started while {running} ran"
            running = event.task_id
        elif isinstance(event.body, TaskCompleted | TurnAborted) and event.task_id == running:
            running = None
    return events


def test_concurrent_execs_from_several_processes_all_run_once_in_one_log(
    durable_stores: StoreFactory, tmp_path: Path
) -> None:
    url = url_of(durable_stores)
    replies = [Step(text=f"reply {i}", chunk_chars=2, chunk_delay=0.02) for i in range(4)]
    with ScriptedModelServer(replies) as server:
        cwd = configure(tmp_path, server.base_url, tmp_path / "bumps")
        first = plait(cwd, "exec", "--store", url, "--json", "hello")
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        session = json.loads(out.splitlines()[-1])["session_id"]
        execs = [
            plait(cwd, "exec", "--store", url, "--session", session, "--json", f"prompt {i}")
            for i in range(3)
        ]
        results = [process.communicate(timeout=120) for process in execs]
    for process, (out, err) in zip(execs, results, strict=True):
        assert process.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["status"] == "completed"
    with open_store(url) as store:
        events = assert_clean(store, session)
        assert store.inbox.commands() == []
    enqueued = [e.body.plan.input_items[0].text for e in events if isinstance(e.body, TaskEnqueued)]
    assert enqueued[0] == "hello" and sorted(enqueued[1:]) == [f"prompt {i}" for i in range(3)]
    completed = [e.task_id for e in events if isinstance(e.body, TaskCompleted)]
    queued = [e.task_id for e in events if isinstance(e.body, TaskEnqueued)]
    assert completed == queued  # each once, in the order they were submitted


@pytest.mark.parametrize("cut", ["mid-stream", "mid-call"])
def test_a_worker_takes_over_the_session_of_a_killed_owner(
    durable_stores: StoreFactory, tmp_path: Path, cut: str
) -> None:
    url, counter = url_of(durable_stores), tmp_path / "bumps"
    counter.touch()
    first = {
        "mid-stream": Step(text="slow " * 100, chunk_chars=5, chunk_delay=0.1),
        "mid-call": Step(tool_calls=[call("t__bump", hold=30)]),
    }[cut]
    kill_at = ModelRequested if cut == "mid-stream" else ToolCallStarted
    with (
        ScriptedModelServer([first, Step(text="back again")]) as server,
        open_store(url) as store,
        worker(configure(tmp_path, server.base_url, counter), url),
    ):
        with owner(url, server.base_url, counter, "work") as doomed:
            assert doomed.stdout is not None
            session = doomed.stdout.readline().strip()
            cut_at = wait_for(store, session, kill_at)
            server.wait_for_requests(1, timeout=60)  # the slow reply is the doomed owner's
            os.killpg(doomed.pid, signal.SIGKILL)
        resumed = wait_for(store, session, SessionResumed, after=cut_at.seq)
        lease = store.leases.get(session)
        assert lease is not None and lease.owner != "doomed" and lease.epoch == 2
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(
            store, RuntimeSettings(model=settings, owner_id="parent", expire_every_sec=None)
        ) as parent:
            followed = parent.resume(session)
            assert followed.followed  # the worker owns it now
            outcome = followed.run("are you there?", timeout=60)
        assert outcome.ok and outcome.last_assistant_message == "back again"
        events = assert_clean(store, session)
    aborted = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert [a.reason for a in aborted] == ["crashed"]
    assert all(e.seq >= resumed.seq for e in events if isinstance(e.body, TurnAborted))
    if cut == "mid-call":
        (answer,) = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
        assert answer.outcome == "unknown"  # not idempotent: never run again
        assert len(counter.read_text().splitlines()) <= 1  # killed before or after it ran


def test_a_paused_owner_woken_after_a_takeover_adds_nothing(
    durable_stores: StoreFactory, tmp_path: Path
) -> None:
    url, counter = url_of(durable_stores), tmp_path / "bumps"
    counter.touch()
    script = [Step(tool_calls=[call("t__bump", hold=2)]), Step(text="taken over")]
    with (
        ScriptedModelServer(script) as server,
        open_store(url) as store,
        owner(url, server.base_url, counter, "work") as paused,
    ):
        assert paused.stdout is not None
        session = paused.stdout.readline().strip()
        started = wait_for(store, session, ToolCallStarted)
        ran(counter)  # the call runs (for 2 s): its owner stops; its MCP server goes on
        pause(paused, durable_stores)
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        env = {"PLAIT_TEST_COUNTER": str(counter)}
        mcp = {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"], env=env)}
        with Runtime(
            store, RuntimeSettings(model=settings, mcp_servers=mcp, owner_id="b", lease_sec=1.0)
        ) as b:
            followed = b.resume(session)  # followed, until the lease lapses: then taken
            outcome = followed.run("are you there?", timeout=60)
            assert outcome.ok and outcome.last_assistant_message == "taken over"
            before = store.last_seq(session)
            os.kill(paused.pid, signal.SIGCONT)
            out, err = paused.communicate(timeout=60)
            assert paused.returncode == 3, err
            assert "no longer owns it" in json.loads(out.splitlines()[-1])["error"]
            woke = store.read(session, after=before)  # b's MCP server may come up late
            assert [e for e in woke if e.task_id is not None] == []  # nothing of the woken
        events = assert_clean(store, session)
    assert counter.read_text().splitlines() == ["bump"]  # the call ran once
    answers = [e for e in events if isinstance(e.body, ToolCallCompleted)]
    assert [(a.body.outcome, a.seq > started.seq) for a in answers] == [("unknown", True)]
    resumed = next(e for e in events if isinstance(e.body, SessionResumed))
    assert answers[0].seq > resumed.seq  # answered by b's recovery, not by the paused owner


def test_plait_sessions_shows_the_owner_of_a_live_session(
    durable_stores: StoreFactory, tmp_path: Path
) -> None:
    url = url_of(durable_stores)
    with ScriptedModelServer([]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(
            url, RuntimeSettings(model=settings, owner_id="host:1:abc", expire_every_sec=None)
        ) as rt:
            session = rt.start_session()
            listed = plait(tmp_path, "sessions", "--store", url, "--json")
            out, err = listed.communicate(timeout=60)
            assert listed.returncode == 0, err
            (row,) = [json.loads(line) for line in out.splitlines()]
            assert (row["session_id"], row["owner"], row["lease"]) == (
                session.session_id,
                "host:1:abc",
                "live",
            )
            assert row["lease_epoch"] == 1 and row["lease_remaining_sec"] > 0
            text = plait(tmp_path, "sessions", "--store", url).communicate(timeout=60)[0]
            assert "  owned by host:1  " in text  # host:pid, as people read an owner id


def test_a_worker_stopped_with_sigterm_lets_its_running_task_end_and_hands_back(
    durable_stores: StoreFactory, tmp_path: Path
) -> None:
    url = url_of(durable_stores)
    slow = Step(text="slow " * 40, chunk_chars=5, chunk_delay=0.05)  # about 2 s
    with ScriptedModelServer([Step(text="hi"), slow]) as server, open_store(url) as store:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(
            store, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
        ) as front:
            session = front.start_session()
            assert session.run("hi", timeout=30).ok
            assert session.release(timeout=30)
            followed = front.follow(session.session_id)
            cwd = configure(tmp_path, server.base_url, tmp_path / "bumps")
            with worker(cwd, url) as running:
                task_id = followed.submit("take your time")
                wait_for(
                    store,
                    session.session_id,
                    ModelRequested,
                    after=store.last_seq(session.session_id) - 1,
                )
                running.send_signal(signal.SIGTERM)  # mid-reply: within its grace period
                _, err = running.communicate(timeout=60)
                assert running.returncode == 143, err
                assert f"stopped by SIGTERM: task {task_id} ended" in err.splitlines()[-1]
        ended = [e for e in store.read(session.session_id) if e.task_id == task_id]
        assert isinstance(ended[-1].body, TaskCompleted)  # finished, not cut off
        lease = store.leases.get(session.session_id)
        assert lease is not None and lease.owner is None  # handed back, free
