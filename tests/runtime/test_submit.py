"""A submit returns a task's id only once the task is in the log: a kill -9 right after it
loses nothing that was acknowledged."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from plait.events import SqliteStore, TaskEnqueued

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from plait.actors._model import ModelSettings
    from plait.runtime import Runtime, RuntimeSettings
    from plait.testing import ScriptedModelServer, Step

    db, how = sys.argv[1], sys.argv[2]
    with ScriptedModelServer([Step(text="slow " * 50, chunk_chars=5, chunk_delay=0.05)]) as server:
        model = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        settings = RuntimeSettings(model=model, expire_every_sec=None, lease_sec=1.0)
        session = Runtime(db, settings).start_session()
        if how == "submit":
            task_id = session.submit("go")
        else:
            task_id = asyncio.run(session.asubmit("go"))
        print(session.session_id, task_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the instant the id is in hand
    """
)


@pytest.mark.parametrize("how", ["submit", "asubmit"])
def test_an_id_a_submit_returned_survives_a_kill_9_right_after(tmp_path: Path, how: str) -> None:
    db = tmp_path / "plait.db"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), how],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    session_id, task_id = child.stdout.split()
    with SqliteStore(db) as store:
        queued = [e for e in store.read(session_id) if isinstance(e.body, TaskEnqueued)]
    assert [e.task_id for e in queued] == [task_id]
