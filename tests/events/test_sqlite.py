"""What only the SQLite store must show: durable defaults, many processes, kill -9, bad files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from support import read_only_dir, sqlite_tamper

from plait import ConcurrencyError, CorruptEventError, PlaitError, StoreError, StoreUnavailableError
from plait.events import SqliteStore, ToolCallCompleted, TurnStarted

WRITER = textwrap.dedent(
    """
    import sys
    from plait._errors import ConcurrencyError
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
        assert store._link.db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert store._link.db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL


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
        store._link.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size * 6 // 10)
    with pytest.raises(PlaitError) as info, SqliteStore(path) as store:
        store.read("s")
    assert str(path) in str(info.value) or "stream s" in str(info.value)


@pytest.mark.parametrize(
    ("column", "value", "called"),
    [("hash", 5, "int"), ("data", 7, "int"), ("prev_hash", 3, "int"), ("count", 1.5, "float")],
)
def test_a_column_of_another_type_is_named_not_a_traceback(
    tmp_path: Path, column: str, value: object, called: str
) -> None:
    # A flipped byte of a record's header changes a value's type: SQLite keeps any in any column.
    path = tmp_path / "p.db"
    with SqliteStore(path) as store:
        for turn in (1, 2, 3):
            store.append("s", [TurnStarted(turn=turn)], turn - 1)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE appends SET {column} = ? WHERE seq = 2", (value,))
    why = f"stream s seq 2: the row's {column} holds a {called}, not "
    with SqliteStore(path) as store:
        with pytest.raises(CorruptEventError, match=why):
            store.read("s")
        with pytest.raises(CorruptEventError, match=why):
            list(store.batches())
        report = store.verify("s")
    assert not report.ok and report.first_bad_seq == 2 and why.split(": ", 1)[1] in report.reason


def test_a_newer_store_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    SqliteStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreUnavailableError, match="schema version 99 is newer"):
        SqliteStore(path)


def test_appends_waiting_together_commit_together_and_fail_alone(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    for i in range(8):
        store.append(f"s{i}", [TurnStarted(1)], 0)
    outcomes: dict[int, object] = {}

    def append(i: int) -> None:
        expected = 0 if i == 3 else 1  # s3 has moved on: this writer is stale
        try:
            outcomes[i] = store.append(f"s{i}", [TurnStarted(2), TurnStarted(3)], expected)
        except ConcurrencyError as exc:
            outcomes[i] = exc

    all_queued = threading.Event()

    class Queue(list[Any]):
        def append(self, item: Any) -> None:
            super().append(item)
            if len(self) == 8:
                all_queued.set()

    store._writes._queue = Queue()
    statements: list[str] = []
    store._link.db.set_trace_callback(statements.append)
    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    with store._link.lock:  # a write in progress: the eight wait for it, together
        for thread in threads:
            thread.start()
        assert all_queued.wait(30)
    for thread in threads:
        thread.join(30)

    assert statements.count("COMMIT") == 1  # one transaction, one fsync, for all eight
    assert isinstance(outcomes.pop(3), ConcurrencyError)
    for i, events in outcomes.items():
        assert [e.seq for e in events] == [2, 3], i  # type: ignore[attr-defined]
    assert [e.seq for e in store.read("s3")] == [1]  # nothing of the stale writer's
    positions = [e.position for e in store.read_all()]
    assert positions == list(range(1, 8 + 7 * 2 + 1))  # dense, in commit order
    assert all(store.verify(f"s{i}").ok for i in range(8))
    store.close()


def test_a_store_sees_the_heads_another_connection_moved(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "s.db") as mine, SqliteStore(tmp_path / "s.db") as other:
        mine.append("s", [TurnStarted(1)], 0)
        other.append("s", [TurnStarted(2)], 1)  # behind the back of what `mine` wrote

        with pytest.raises(ConcurrencyError):
            mine.append("s", [TurnStarted(2)], 1)
        mine.append("s", [TurnStarted(3)], 2)

        assert [(e.seq, e.position) for e in mine.read("s")] == [(1, 1), (2, 2), (3, 3)]
        assert mine.verify("s").ok


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


def _mixed_log(store: SqliteStore) -> None:
    big = "x" * (store.blob_threshold + 1)
    for i in range(5):
        bodies = [TurnStarted(turn=n) for n in range(6)]
        bodies.insert(2, ToolCallCompleted(call_id=f"c{i}", output=big if i % 2 else "small"))
        for stream in ("a", "b"):
            store.append(stream, bodies, store.last_seq(stream))


def test_a_rebuild_reads_every_event_as_rows_read_them(db: Path) -> None:
    with SqliteStore(db) as store:
        _mixed_log(store)
        every = store.read_all(limit=None)
        assert len(every) == 70
        for resolve in (True, False):
            rows = store.read_all(limit=None, resolve_blobs=resolve)
            assert list(store.iter_all(batch=3, resolve_blobs=resolve)) == rows
        outputs = [e.body.output for e in every if isinstance(e.body, ToolCallCompleted)]
        assert "x" * (store.blob_threshold + 1) in outputs
        batches = list(store.batches(every[20].position, batch=3))
        assert [e for b in batches for e in b] == every[21:]
        assert all(0 < len(b) <= 3 for b in batches)


def test_a_rebuild_names_a_row_that_does_not_decode(db: Path) -> None:
    with SqliteStore(db) as store:
        _mixed_log(store)
        # Seq 29 begins an append: an edit is found at the row that holds it.
        sqlite_tamper(db).set_data("b", 29, b"\xc1")
        with pytest.raises(CorruptEventError, match="stream b seq 29"):
            list(store.iter_all())


def test_a_blob_row_that_no_longer_says_what_it_holds_stops_every_read(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    output = "the tool's long answer " * 200  # too long to be kept in its row
    with SqliteStore(path, blob_threshold=64) as store:
        store.append("s", [TurnStarted(turn=1), ToolCallCompleted(call_id="c", output=output)], 0)
        (key,) = store._link.db.execute("SELECT sha256 FROM blobs").fetchone()
        store._link.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    at = next(  # the key as the blob's row holds it, right before its size and content
        i
        for i in range(len(data))
        if data.startswith(key.encode(), i) and data.find(output[:20].encode(), i, i + 100) > 0
    )
    data[at + 3] ^= 0x01
    path.write_bytes(bytes(data))
    damaged = rf"p.db: damaged: blob row sha256:{key} does not say what it holds"
    with SqliteStore(path) as store:
        for read in (lambda: store.read("s"), lambda: list(store.iter_all())):
            with pytest.raises(StoreError, match=damaged):
                read()
        store._link.db.execute("UPDATE blobs SET size = size + 1")  # the key right, its size not
        store._link.db.commit()
        with pytest.raises(StoreError, match=damaged):
            store.read("s")


def _files(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Each file of ``directory``: its bytes and its mtime (ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_a_store_in_a_read_only_directory_opens_read_only(tmp_path: Path) -> None:
    source = tmp_path / "store"
    with SqliteStore(source / "plait.db") as store:
        store.append("s1", [TurnStarted(turn=1), ToolCallCompleted("c", "x" * 20_000)], 0)
    before = _files(source)  # a closed store is one file: its write-ahead log checkpointed
    assert list(before) == ["plait.db"]
    with read_only_dir(source, tmp_path / "ro") as ro:
        with pytest.raises(StoreUnavailableError) as refused:
            SqliteStore(ro / "plait.db")  # a writer: refused in one line naming the file
        why = "it is on a read-only file system" if ro != source else "the file is read-only"
        assert str(refused.value) == (
            f"{ro / 'plait.db'}: cannot write the store: {why} (commands that only read it, "
            "such as plait log, verify and audit, open it read-only)"
        )
        with SqliteStore(ro / "plait.db", read_only=True) as reader:
            assert [e.seq for e in reader.read("s1")] == [1, 2]
            assert reader.verify("s1").ok and reader.check_file(full=True) is None
            assert [info.stream for info in reader.streams()] == ["s1"]
            with pytest.raises(StoreError, match=r"plait\.db: opened read-only, so it cannot"):
                reader.append("s1", [TurnStarted(turn=2)], 2)
    assert _files(source) == before  # not a byte, not a time, not a file more


def test_a_read_only_store_reads_what_a_writer_commits(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "plait.db") as writer:
        writer.append("s1", [TurnStarted(turn=1)], 0)
        with SqliteStore(tmp_path / "plait.db", read_only=True) as reader:
            writer.append("s1", [TurnStarted(turn=2)], 1)  # in the write-ahead log only
            assert [e.seq for e in reader.read("s1")] == [1, 2]
            with pytest.raises(StoreError, match="opened read-only"):
                reader.blobs.redact("0" * 64)
    with pytest.raises(StoreUnavailableError, match=r"nowhere\.db: no store here"):
        SqliteStore(tmp_path / "nowhere.db", read_only=True)
    assert not (tmp_path / "nowhere.db").exists()


@pytest.mark.parametrize("call", ["lease", "append", "prune"])
def test_a_transaction_a_signal_left_open_is_ended_by_the_next_write(
    tmp_path: Path, call: str
) -> None:
    with SqliteStore(tmp_path / "s.db") as store:
        store.append("s", [TurnStarted(turn=1)], 0)
        # What a second SIGTERM leaves when it lands between a write's BEGIN and its end.
        store._link.db.execute("BEGIN IMMEDIATE")
        store._link.db.execute("DELETE FROM streams")  # never committed
        if call == "lease":
            assert store.leases.acquire("s", "me", 10).owner == "me"
        elif call == "append":
            store.append("s", [TurnStarted(turn=2)], 1)
        else:
            store.pruning.remove([], [])  # what pruning writes with
        assert [e.seq for e in store.read("s")] == [1, 2][: 2 if call == "append" else 1]
