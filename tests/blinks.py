"""The store blinks: every connection of the processes under test is cut, from outside, as a
failover, an idle reaper or an admin's ``pg_terminate_backend`` cuts them (docs/failures.md).

The processes under test connect as a role and with an ``application_name`` of their own
(``Blinks.url``), so a round ends their connections only (not the test's control connection,
nor those of tests running beside it on the same database), and ``shut`` keeps the server away
from them alone, as long as the test wants.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from scripted import call
from support import POSTGRES_URL, wait_for_event

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    EventStore,
    ModelRequested,
    SessionClosed,
    ToolCallCompleted,
    ToolCallRequested,
)
from plait.runtime import Runtime, RuntimeSettings, SessionHandle, TaskOutcome
from plait.testing import ScriptedModelServer, Step

__all__ = [
    "SCRIPT",
    "Blinks",
    "assert_ran_once",
    "mcp_servers",
    "plait_toml",
    "run_through",
    "worker_through",
]


class Blinks:
    """Rounds of ``pg_terminate_backend`` on every connection named ``name``."""

    def __init__(self, schema: str, query: str = "") -> None:
        self.name = f"plait_blink_{uuid.uuid4().hex[:12]}"
        """The role and ``application_name`` of the connections the rounds end."""
        parts = urlsplit(POSTGRES_URL)
        netloc = f"{self.name}@{parts.netloc.rpartition('@')[2]}"
        params = f"schema={schema}&application_name={self.name}{query}"
        self.url = urlunsplit(parts._replace(netloc=netloc, query=params))
        """The store URL the processes under test open (``query``: more parameters)."""
        self.ended: list[int] = []
        """How many connections each round ended."""
        self._control(f'CREATE ROLE "{self.name}" LOGIN SUPERUSER')
        self._pause = threading.Event()  # never set: rounds are paced on it, not slept

    def shut(self) -> None:
        """Refuse the role's connections from now on, and end those it has: to the processes
        under test, the server is gone until ``open``."""
        self._control(f'ALTER ROLE "{self.name}" NOLOGIN')
        self.round()

    def open(self) -> None:
        """Let the role connect again: the server is back."""
        self._control(f'ALTER ROLE "{self.name}" LOGIN')

    def round(self) -> int:
        """End every connection named ``name`` now; return how many there were."""
        ended = self._control(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s "
            "AND pid <> pg_backend_pid()",
            (self.name,),
        )
        self.ended.append(ended)
        return ended

    @staticmethod
    def _control(statement: str, params: tuple[str, ...] = ()) -> int:
        """Run ``statement`` on a control connection of the test's (one each time: a server
        restart ends them too); return the first column of its row, if any."""
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            cursor = conn.execute(statement.encode(), params or None)
            found = cursor.fetchone() if cursor.description else None
        return int(found[0]) if found else 0

    def gap(self, seconds: float) -> None:
        """Let ``seconds`` pass between two rounds (the processes work meanwhile)."""
        self._pause.wait(seconds)

    def close(self) -> None:
        self.round()
        self._control(f'DROP ROLE "{self.name}"')


SERVER = Path(__file__).parent / "mcp" / "server.py"

SCRIPT = [
    # About 4 s of streaming, then one call of a tool that is not idempotent (it counts).
    Step(text="slow " * 40, chunk_chars=5, chunk_delay=0.1, tool_calls=[call("t__bump")]),
    Step(text="one done"),
    Step(text="two done"),
]
"""Task one: a slow reply and a tool call; task two, submitted while the store blinks."""


def plait_toml(cwd: Path, base_url: str, url: str, counter: Path) -> None:
    """Write ``cwd/plait.toml``: the model server, the counting MCP server, the store."""
    (cwd / "plait.toml").write_text(
        f'[model]\nbase_url = "{base_url}"\nmodel = "m"\nmax_attempts = 1\n'
        f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{SERVER}", "stdio"]\n'
        f'env = {{ PLAIT_TEST_COUNTER = "{counter}" }}\n'
        f'[store]\nurl = "{url}"\n'
    )


def mcp_servers(counter: Path) -> dict[str, McpServerConfig]:
    """The counting MCP server, for a ``Runtime``."""
    env = {"PLAIT_TEST_COUNTER": str(counter)}
    return {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"], env=env)}


def run_through(
    front: SessionHandle, store: EventStore, disturb: Callable[[Callable[[], None]], None]
) -> tuple[TaskOutcome, TaskOutcome]:
    """Run task one in ``front``'s session, and, once its model request is out, ``disturb``
    the store; ``disturb`` calls what it is given once, mid-way, to run task two (submitted
    from the front end then). Return both outcomes."""
    sid = front.session_id
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(front.run, "one", timeout=120)
        wait_for_event(store, sid, ModelRequested)
        two: list[Future[TaskOutcome]] = []
        disturb(lambda: two.append(pool.submit(front.run, "two", timeout=120)))
        return one.result(timeout=150), two[0].result(timeout=150)


def assert_ran_once(store: EventStore, sid: str, counter: Path, *outcomes: TaskOutcome) -> None:
    """Each task completed, the session was not closed, its log verifies, and the one tool
    call ran once."""
    assert [o.status for o in outcomes] == ["completed"] * len(outcomes), outcomes
    assert [o.last_assistant_message for o in outcomes] == ["one done", "two done"]
    events = store.read(sid)
    assert not [e for e in events if isinstance(e.body, SessionClosed)]
    assert store.verify(sid).ok
    (requested,) = [e.body for e in events if isinstance(e.body, ToolCallRequested)]
    (completed,) = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert completed.call_id == requested.call_id and completed.outcome == "ok"
    assert counter.read_text().splitlines() == ["bump"]


ENV = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}
ENV["OPENAI_API_KEY"] = "k"
"""A ``plait`` process's environment: the test's, without what would change what plait reads."""


def worker_through(
    rounds: Blinks,
    store: EventStore,
    cwd: Path,
    disturb: Callable[[Callable[[], None]], None],
) -> None:
    """A real ``plait worker`` runs ``SCRIPT``'s two tasks, submitted by a front end that
    follows the session, while ``disturb`` disturbs the store (see ``run_through``); it runs
    on and stops only for SIGTERM, the tasks complete once each, ``plait verify`` is clean."""
    counter = cwd / "bumps"
    counter.touch()
    with ScriptedModelServer(SCRIPT) as server:
        plait_toml(cwd, server.base_url, rounds.url, counter)
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(rounds.url, RuntimeSettings(model=settings, owner_id="front")) as front:
            started = front.start_session()
            assert started.release(10)  # the worker takes it when work comes
            followed = front.follow(started.session_id)
            worker = subprocess.Popen(
                [sys.executable, "-m", "plait", "worker", "--lease-sec", "3"],
                cwd=cwd,
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                outcomes = run_through(followed, store, disturb)
                assert worker.poll() is None  # it runs on
            finally:
                worker.send_signal(signal.SIGTERM)
                _, err = worker.communicate(timeout=60)
            assert worker.returncode == 143, err  # stopped by the signal, not by the store
    assert_ran_once(store, started.session_id, counter, *outcomes)
    verified = subprocess.run(
        [sys.executable, "-m", "plait", "verify", started.session_id, "--store", rounds.url],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
