"""The store blinks: every connection of the processes under test is cut, from outside, as a
failover, an idle reaper or an admin's ``pg_terminate_backend`` cuts them (docs/failures.md).

The processes under test connect as a role and with an ``application_name`` of their own
(``Blinks.url``), so a round ends their connections only (not the test's control connection,
nor those of tests running beside it on the same database), and ``shut`` keeps the server away
from them alone, as long as the test wants.
"""

from __future__ import annotations

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

from plait.actors.mcp.config import McpServerConfig
from plait.events import (
    EventStore,
    ModelRequested,
    SessionClosed,
    ToolCallCompleted,
    ToolCallRequested,
)
from plait.runtime import SessionHandle, TaskOutcome
from plait.testing import Step

__all__ = ["SCRIPT", "Blinks", "assert_ran_once", "mcp_servers", "plait_toml", "run_through"]


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
        self._control = psycopg.connect(POSTGRES_URL, autocommit=True)
        self._control.execute(f'CREATE ROLE "{self.name}" LOGIN SUPERUSER')
        self._pause = threading.Event()  # never set: rounds are paced on it, not slept

    def shut(self) -> None:
        """Refuse the role's connections from now on, and end those it has: to the processes
        under test, the server is gone until ``open``."""
        self._control.execute(f'ALTER ROLE "{self.name}" NOLOGIN')
        self.round()

    def open(self) -> None:
        """Let the role connect again: the server is back."""
        self._control.execute(f'ALTER ROLE "{self.name}" LOGIN')

    def round(self) -> int:
        """End every connection named ``name`` now; return how many there were."""
        (ended,) = self._control.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s "
            "AND pid <> pg_backend_pid()",
            (self.name,),
        ).fetchone() or (0,)
        self.ended.append(int(ended))
        return int(ended)

    def gap(self, seconds: float) -> None:
        """Let ``seconds`` pass between two rounds (the processes work meanwhile)."""
        self._pause.wait(seconds)

    def close(self) -> None:
        self.round()
        self._control.execute(f'DROP ROLE "{self.name}"')
        self._control.close()


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
