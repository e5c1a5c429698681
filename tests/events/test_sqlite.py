"""What only the SQLite store must show: durable defaults, many processes, kill -9, bad files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from plait.errors import PlaitError, StoreUnavailableError
from plait.events import SqliteStore, TurnStarted

WRITER = textwrap.dedent(
    """
    import sys
    from plait.errors import ConcurrencyError
    from plait.events import NewEvent, SqliteStore, TurnStarted

    path, who, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = SqliteStore(path)
    for turn in range(count):
        while True:
            seq = store.last_seq("shared")
            try:
                store.append("shared", [NewEvent(TurnStarted(turn), task_id=who)] * batch, seq)
                break
            except ConcurrencyError:
                pass
        print(turn, flush=True)
    """
)


def writer(path: Path, who: str, count: int, batch: int = 1) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), who, str(count), str(batch)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_defaults_are_durable(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "p.db") as store:
        assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert store._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL


def test_processes_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    SqliteStore(path).close()
    procs = [writer(path, str(i), 25) for i in range(3)]
    for proc in procs:
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    with SqliteStore(path) as store:
        events = store.read("shared")
        assert [e.seq for e in events] == list(range(1, 76))
        assert sorted(e.task_id or "" for e in events) == sorted(["0", "1", "2"] * 25)
        assert store.verify("shared").ok


def test_another_process_appends_reach_a_live_subscriber(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with SqliteStore(path) as store, store.subscribe() as tail:
        proc = writer(path, "w", 5)
        seen = [tail.get(timeout=30) for _ in range(5)]
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    assert [e.seq if e else None for e in seen] == [1, 2, 3, 4, 5]


def test_kill_9_mid_append_loses_no_acknowledged_event_and_no_half_batch(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    SqliteStore(path).close()
    proc = writer(path, "w", 100_000, batch=10)
    assert proc.stdout is not None
    acknowledged = 0
    for line in proc.stdout:  # each line is printed after its append committed
        acknowledged = int(line) + 1
        if acknowledged >= 30:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    with SqliteStore(path) as store:
        last = store.last_seq("shared")
        assert last >= acknowledged * 10
        assert last % 10 == 0  # whole batches only
        assert len(store.read("shared")) == last
        assert store.verify("shared").ok


def test_a_file_that_is_not_a_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database " * 100)
    with pytest.raises(StoreUnavailableError, match=r"notes.txt: not a readable plait store"):
        SqliteStore(path)


def test_a_truncated_file_never_reads_as_a_shorter_history(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with SqliteStore(path) as store:
        store.append("s", [TurnStarted(turn=i) for i in range(3000)], 0)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size * 6 // 10)
    with pytest.raises(PlaitError) as info, SqliteStore(path) as store:
        store.read("s")
    assert str(path) in str(info.value) or "stream s" in str(info.value)


def test_a_newer_store_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreUnavailableError, match="schema version 99 is newer"):
        SqliteStore(path)
