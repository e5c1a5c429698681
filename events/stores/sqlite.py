"""``SqliteStore``: the embedded default; one file, WAL, durable commits.

One connection per store object, guarded by a lock, serves every thread. Appends made while
another is being written wait together and are written in one transaction (group commit: one
fsync for many sessions' appends, each still acknowledged only once it is durable, and each
refused for its own reason only). ``BEGIN IMMEDIATE``
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

_COLUMNS = "position, stream, seq, type, v, data, hash"
_INSERT = f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"

# The last position and the stream's head, in one statement (a row even for a new stream).
_HEAD = (
    "SELECT (SELECT coalesce(max(position), 0) FROM events), last_seq, last_hash "
    "FROM (SELECT 1) LEFT JOIN streams ON streams.stream = ?"
)

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
        self._queue_lock = threading.Lock()
        self._queue: list[_Append] = []  # appends waiting for the writer's lock
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
        # Group commit: whoever takes the writer's lock writes every append queued by then, in
        # one transaction (one fsync); the others find theirs written when they get the lock.
        mine = _Append(stream, expected_seq, prepare)
        with self._queue_lock:
            self._queue.append(mine)
        with self._lock:
            if not mine.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    self._write(batch)
                except BaseException as exc:  # not the store's failure: raised here, and
                    for append in batch:  # the others in the batch are told, not left waiting
                        if not append.done:
                            append.fail(StoreError(f"{self.path}: not written: {exc!r}"))
                    raise
        if mine.error is not None:
            raise mine.error
        return mine.events

    def _write(self, batch: list[_Append]) -> None:
        """Write ``batch`` in one transaction; if it fails as a whole, write each alone, so
        that each append fails for its own reason only."""
        try:
            with self._errors():
                self._transaction(batch)
        except StoreError as exc:
            if len(batch) == 1:
                batch[0].fail(exc)
                return
            for append in batch:
                self._write([append])

    def _transaction(self, batch: list[_Append]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            written = [(append, self._append_one(append)) for append in batch]
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        for append, placed in written:
            if placed is not None:
                append.succeed(placed)

    def _append_one(self, append: _Append) -> list[Event] | None:
        """Write one append inside the open transaction; ``None`` if it was refused (a
        concurrent writer, an event it cannot store), which writes nothing for it."""
        db, stream = self._db, append.stream
        last_position, head_seq, head_hash = db.execute(_HEAD, (stream,)).fetchone()
        head = head_seq is not None
        if not head:
            head_seq, head_hash = 0, GENESIS_HASH
        try:
            self._check_expected(stream, append.expected_seq, head_seq)
            prepared = append.prepare(head_seq, head_hash)
        except Exception as exc:
            append.fail(exc)
            return None
        first = last_position + 1
        if len(prepared.rows) == 1:  # the common case; execute is cheaper for one row
            db.execute(_INSERT, (first, stream, *prepared.rows[0]))
        else:
            db.executemany(
                _INSERT, [(pos, stream, *row) for pos, row in enumerate(prepared.rows, first)]
            )
        if prepared.blobs:
            db.executemany(
                "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?) "
                "ON CONFLICT (sha256) DO UPDATE SET data = excluded.data "
                "WHERE blobs.data IS NULL",
                [(sha, len(data), data) for sha, data in prepared.blobs.items()],
            )
        last = prepared.rows[-1]
        if head:
            db.execute(
                "UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?",
                (last[0], last[4], stream),
            )
        else:
            db.execute(
                "INSERT INTO streams (stream, last_seq, last_hash, created) VALUES (?, ?, ?, ?)",
                (stream, last[0], last[4], first),
            )
        return prepared.placed(first)

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


class _Append:
    """One append waiting to be written, and how it went."""

    __slots__ = ("done", "error", "events", "expected_seq", "prepare", "stream")

    def __init__(
        self, stream: str, expected_seq: int, prepare: Callable[[int, bytes], PreparedAppend]
    ) -> None:
        self.stream = stream
        self.expected_seq = expected_seq
        self.prepare = prepare
        self.done = False
        self.events: list[Event] = []
        self.error: Exception | None = None

    def succeed(self, events: list[Event]) -> None:
        self.events, self.error, self.done = events, None, True

    def fail(self, error: Exception) -> None:
        self.error, self.done = error, True


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
