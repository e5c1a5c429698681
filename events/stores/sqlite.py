"""``SqliteStore``: the embedded default; one file, WAL, durable commits.

One connection per store object, guarded by a lock, serves every thread; appends made while
another is being written are written with it (``sqlite_writes.py``). ``BEGIN IMMEDIATE``
and SQLite's file locks serialize writers across processes, and the ``streams`` head row turns a
lost race into a ``ConcurrencyError`` rather than a fork of the chain. Positions are assigned as
``max + 1`` under the write lock, so they are dense and commit-ordered.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from plait.errors import StoreError, StoreUnavailableError
from plait.events.blobs import DEFAULT_BLOB_THRESHOLD
from plait.events.codec import GENESIS_HASH
from plait.events.store import (
    REDACTED,
    Clock,
    EventStore,
    PreparedAppend,
    RedactedMarker,
    Row,
    Waiter,
    utc_now,
)
from plait.events.stores.sqlite_writes import Writes
from plait.events.types import Event

__all__ = ["SqliteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    position INTEGER PRIMARY KEY,
    stream   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    type     TEXT    NOT NULL,
    v        INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    hash     BLOB    NOT NULL,
    UNIQUE (stream, seq)
);
CREATE TABLE IF NOT EXISTS streams (
    stream    TEXT    PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    last_hash BLOB    NOT NULL,
    created   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT    PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB
);
"""


Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SqliteStore(EventStore):
    """An event store in one SQLite file (created if missing)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        clock: Clock = utc_now,
        busy_timeout_sec: float = 30.0,
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        self.path = Path(path)
        self._lock = threading.RLock()
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_sec
            )
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"{path}: cannot open the SQLite store: {exc}") from exc
        with self._errors():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA secure_delete=ON")  # deleted content is overwritten
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout_sec * 1000)}")
            self._migrate()
        self._writes = Writes(self._db, self._lock, self._errors, self.path)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "not a database" in text or "malformed" in text:
                raise StoreUnavailableError(
                    f"{self.path}: not a readable plait store ({text})"
                ) from exc
            raise StoreError(f"{self.path}: {text}") from exc

    def _migrate(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self.path}: store schema version {version} is newer than this plait "
                    f"understands ({SCHEMA_VERSION}); upgrade plait"
                )
            if version < SCHEMA_VERSION:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _append_rows(
        self, stream: str, expected_seq: int, prepare: Callable[[int, bytes], PreparedAppend]
    ) -> list[Event]:
        return self._writes.append(stream, expected_seq, prepare)

    def _query(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return self._db.execute(sql, params).fetchall()

    def _head(self, stream: str) -> tuple[int, bytes]:
        rows = self._query("SELECT last_seq, last_hash FROM streams WHERE stream = ?", (stream,))
        if not rows:
            return 0, GENESIS_HASH
        seq, digest = rows[0]
        return int(seq), bytes(digest)

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Row]:
        rows = self._query(
            "SELECT position, data, hash FROM events WHERE stream = ? AND seq > ? AND seq <= ? "
            "ORDER BY seq LIMIT ?",
            (stream, after, upto if upto is not None else 2**62, -1 if limit is None else limit),
        )
        return rows

    def _all_rows(self, after_position: int, limit: int | None) -> list[Row]:
        rows = self._query(
            "SELECT position, data, hash FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after_position, -1 if limit is None else limit),
        )
        return rows

    def _locate(self, position: int) -> tuple[str, int]:
        rows = self._query("SELECT stream, seq FROM events WHERE position = ?", (position,))
        return (str(rows[0][0]), int(rows[0][1])) if rows else ("?", 0)

    def _streams(self) -> list[tuple[str, int]]:
        rows = self._query("SELECT stream, last_seq FROM streams ORDER BY created", ())
        return [(str(stream), int(last)) for stream, last in rows]

    def _blob(self, sha256: str) -> bytes | RedactedMarker | None:
        rows = self._query("SELECT data FROM blobs WHERE sha256 = ?", (sha256,))
        if not rows:
            return None
        data = rows[0][0]
        return REDACTED if data is None else bytes(data)

    def _redact(self, sha256: str) -> bool:
        with self._lock, self._errors():
            cur = self._db.execute("UPDATE blobs SET data = NULL WHERE sha256 = ?", (sha256,))
            # Its old pages leave the write-ahead log too, so the file no longer holds it.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return cur.rowcount > 0

    def _data_version(self) -> int:
        rows = self._query("PRAGMA data_version", ())
        return int(rows[0][0])

    def _waiter(self) -> Waiter:
        return _FileWaiter(self)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _FileWaiter(Waiter):
    """Wakes at once for appends through this store object, and notices other processes'
    commits by SQLite's ``data_version`` (SQLite has no cross-process notification)."""

    POLL_SEC = 0.05

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._closed = False

    def token(self) -> int:
        # Local appends move the change count; other processes' commits move data_version.
        return self._store._change_count * 2**32 + self._store._data_version()

    def wait(self, token: int, timeout: float | None) -> None:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        changed = self._store._changed
        while not self._closed and self.token() == token:
            step = self.POLL_SEC
            if deadline is not None:
                step = min(step, deadline - time.monotonic())
                if step <= 0:
                    return
            with changed:
                changed.wait_for(
                    lambda: self._closed or self._store._change_count != token // 2**32,
                    step,
                )

    def close(self) -> None:
        self._closed = True
        with self._store._changed:
            self._store._changed.notify_all()
