"""Leases across a PostgreSQL restart: the server stops and starts under a running runtime,
which keeps its sessions (same owner, same epoch) and goes on; another process still follows.
A worker whose task is mid-reply when the server restarts runs it to its end, and a front end's
submit made during the restart runs too (docs/failures.md#the-store-blinks).

It restarts the tests' PostgreSQL server (the machine's, or the one the run started:
tests/pg_server.py), so it runs alone, by hand:
``pytest -m pg_restart -n0 tests/runtime/test_pg_restart.py``.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pg_server
import pytest
from blinks import Blinks, worker_through
from support import POSTGRES_URL, StoreFactory

from plait.actors import ModelSettings
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

pytestmark = pytest.mark.pg_restart


def restart_postgres() -> None:
    own = os.environ.get(pg_server.DATA_VARIABLE)
    if own:
        pg_server.restart(Path(own))
        return
    (version,) = [p.name for p in Path("/etc/postgresql").iterdir()]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        timeout=120,
    )


def test_a_runtime_keeps_its_sessions_across_a_postgres_restart(tmp_path: Path) -> None:
    stores = StoreFactory("postgres", tmp_path)
    try:
        url = f"{POSTGRES_URL}?schema={stores.schema}"
        stores.open()
        with ScriptedModelServer([Step(text="before"), Step(text="after")]) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
            with Runtime(
                url, RuntimeSettings(model=settings, owner_id="a", expire_every_sec=None)
            ) as a:
                session = a.start_session()
                assert session.run("one", timeout=30).ok
                restart_postgres()
                outcome = session.run("two", timeout=60)  # its store reconnects
                assert outcome.ok and outcome.last_assistant_message == "after"
                lease = a.store.leases.get(session.session_id)
                assert lease is not None and (lease.owner, lease.epoch, lease.live) == (
                    "a",
                    1,
                    True,
                )
                with Runtime(
                    url, RuntimeSettings(model=settings, owner_id="b", expire_every_sec=None)
                ) as b:
                    assert b.resume(session.session_id).followed
                assert a.store.verify(session.session_id).ok
    finally:
        stores.close()


def test_a_worker_runs_its_task_on_across_a_postgres_restart(tmp_path: Path) -> None:
    stores = StoreFactory("postgres", tmp_path)
    store = stores.open()
    rounds = Blinks(stores.schema)

    def restart(task_two: Callable[[], None]) -> None:
        restarting = threading.Thread(target=restart_postgres)
        restarting.start()
        task_two()  # submitted while the server stops and starts
        restarting.join(120)
        assert not restarting.is_alive()

    try:
        worker_through(rounds, store, tmp_path, restart)
    finally:
        rounds.close()
        stores.close()
