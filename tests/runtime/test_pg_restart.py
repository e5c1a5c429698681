"""Leases across a PostgreSQL restart: the server stops and starts under a running runtime,
which keeps its sessions (same owner, same epoch) and goes on; another process still follows.

It restarts the machine's PostgreSQL server, so it runs alone, by hand:
``pytest -m pg_restart -n0 tests/runtime/test_pg_restart.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import POSTGRES_URL, StoreFactory

from plait.actors.model import ModelSettings
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

pytestmark = pytest.mark.pg_restart


def restart_postgres() -> None:
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
            with Runtime(url, model=settings, owner_id="a", expire_every_sec=None) as a:
                session = a.start_session()
                assert session.run("one", timeout=30).ok
                restart_postgres()
                outcome = session.run("two", timeout=60)  # its store reconnects
                assert outcome.ok and outcome.last_assistant_message == "after"
                lease = a.store.lease(session.session_id)
                assert lease is not None and (lease.owner, lease.epoch, lease.live) == (
                    "a",
                    1,
                    True,
                )
                with Runtime(url, model=settings, owner_id="b", expire_every_sec=None) as b:
                    assert b.resume(session.session_id).followed
                assert a.store.verify(session.session_id).ok
    finally:
        stores.close()
