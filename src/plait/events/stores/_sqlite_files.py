"""How ``SqliteStore`` opens its file: for writing (created if missing), or for reading only;
and how a reader of it waits for what another process writes.

A store in WAL mode is read through its write-ahead log's index, the ``-shm`` file beside it,
which even a reader must be able to create or write. On a read-only mount or in a directory
plait may not write, a plain open, and even SQLite's ``mode=ro``, fail with "unable to open
database file". Then a reader opens the file ``immutable`` (SQLite reads it as it is, without
the index or locks), which is right only when no write-ahead log holds commits the file does
not have yet: if one does, it says so rather than show an older log.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from plait._errors import StoreUnavailableError
from plait.events._subscription import Signal, Waiter

__all__ = ["FileWaiter", "begin", "open_read_only", "open_writable", "rollback"]


def begin(db: sqlite3.Connection) -> None:
    """Start a write transaction (``BEGIN IMMEDIATE``: SQLite's write lock, across processes),
    first ending one that was left open. A store uses its connection under its lock, so a
    transaction open here is one a call left when an exception came between its ``BEGIN`` and
    its end: a second signal, which stops a process at once wherever it is
    (docs/processes.md#stopping)."""
    rollback(db)
    db.execute("BEGIN IMMEDIATE")


def rollback(db: sqlite3.Connection) -> None:
    """End the transaction open on ``db``, if one is, writing nothing of it."""
    if db.in_transaction:
        db.execute("ROLLBACK")


def _connect(target: str, busy_timeout_sec: float, *, uri: bool = False) -> sqlite3.Connection:
    return sqlite3.connect(
        target, isolation_level=None, check_same_thread=False, timeout=busy_timeout_sec, uri=uri
    )


def open_writable(path: Path, busy_timeout_sec: float) -> sqlite3.Connection:
    """Open (or create) the store at ``path`` for writing, in WAL mode."""
    try:
        new = str(path) != ":memory:" and (not path.exists() or path.stat().st_size == 0)
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        db = _connect(str(path), busy_timeout_sec)
        if new:  # before WAL mode writes the header: a prune can give pages back then
            db.execute("PRAGMA page_size=2048")
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # (docs/storage.md#retention)
    except (OSError, sqlite3.Error) as exc:
        raise StoreUnavailableError(f"{path}: cannot open the SQLite store: {exc}") from exc
    try:
        db.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError as exc:  # its file or directory may be read-only
        db.close()
        why = _read_only(path)
        if why is None:
            raise StoreUnavailableError(f"{path}: cannot open the SQLite store: {exc}") from exc
        raise StoreUnavailableError(
            f"{path}: cannot write the store: {why} (commands that only read it, such as "
            "plait log, verify and audit, open it read-only)"
        ) from exc
    except sqlite3.DatabaseError:
        pass  # not a database: the store's first read says so, naming the file
    return db


def _read_only(path: Path) -> str | None:
    """Why plait cannot write the store at ``path`` (``None``: it is not read-only)."""
    with contextlib.suppress(OSError):
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is read-only"
    if not os.access(path.parent, os.W_OK):
        return f"its directory {path.parent} is read-only"
    return None


def open_read_only(path: Path, busy_timeout_sec: float) -> sqlite3.Connection:
    """Open the existing store at ``path`` for reading only; nothing is written to it."""
    if not path.is_file():
        raise StoreUnavailableError(f"{path}: no store here")
    uri = path.resolve().as_uri()
    db = _connect(f"{uri}?mode=ro", busy_timeout_sec, uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc):
            return db  # the store's first read says what is wrong, naming the file
        db.close()
    except sqlite3.DatabaseError:
        return db
    # WAL, and its index cannot be made here: read the file as it is, if it is all there.
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise StoreUnavailableError(
            f"{path}: cannot read it read-only: its write-ahead log {wal.name} holds commits "
            f"the file does not have yet, and SQLite cannot create its index {path.name}-shm "
            f"in {path.parent}; open it once where it can be written, or copy the three files"
        )
    db = _connect(f"{uri}?mode=ro&immutable=1", busy_timeout_sec, uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError as exc:
        db.close()
        raise StoreUnavailableError(f"{path}: cannot open the SQLite store: {exc}") from exc
    except sqlite3.DatabaseError:
        pass
    return db


class FileWaiter(Waiter):
    """Wakes at once when ``signal`` moves (appends, or commands, through this store object),
    and notices other processes' commits by SQLite's ``data_version`` (SQLite has no
    cross-process notification)."""

    POLL_SEC = 0.05

    def __init__(self, data_version: Callable[[], int], signal: Signal) -> None:
        self._data_version = data_version
        self._signal = signal
        self._closed = False

    def token(self) -> int:
        # Local appends move the signal; other processes' commits move data_version.
        return self._signal.count * 2**32 + self._data_version()

    def wait(self, token: int, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        changed = self._signal.changed
        while not self._closed and self.token() == token:
            step = self.POLL_SEC
            if deadline is not None:
                step = min(step, deadline - time.monotonic())
                if step <= 0:
                    return
            with changed:
                changed.wait_for(lambda: self._closed or self._signal.count != token // 2**32, step)

    def close(self) -> None:
        self._closed = True
        with self._signal.changed:
            self._signal.changed.notify_all()
