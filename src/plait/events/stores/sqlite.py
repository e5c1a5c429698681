"""``SqliteStore``: the embedded default; one file, WAL, durable commits.

Its rows are a row per append, of encoding 3, as PostgreSQL's are (``sqlite_schema.py``). One
connection per store object, guarded by a lock, serves every thread; appends made while another
is being written are written with it (``sqlite_writes.py``). ``BEGIN IMMEDIATE``
and SQLite's file locks serialize writers across processes, and the ``streams`` head row turns a
lost race into a ``ConcurrencyError`` rather than a fork of the chain. Positions are assigned as
``max + 1`` under the write lock, so they are dense and commit-ordered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from plait.errors import StoreError, StoreUnavailableError
from plait.events.blobs import DEFAULT_BLOB_THRESHOLD
from plait.events.codec import GENESIS_HASH
from plait.events.ownership import ENDED, Lease, taken
from plait.events.per_append import PerAppendStore
from plait.events.space import Space
from plait.events.store import (
    REDACTED,
    Clock,
    PreparedAppend,
    RedactedMarker,
    Waiter,
    utc_now,
)
from plait.events.stores.sqlite_content import delete as delete_content
from plait.events.stores.sqlite_content import find as find_content
from plait.events.stores.sqlite_files import (
    FileWaiter,
    begin,
    open_read_only,
    open_writable,
    rollback,
)
from plait.events.stores.sqlite_legacy import layout_of, move
from plait.events.stores.sqlite_prune import SqlitePruning
from plait.events.stores.sqlite_schema import (
    ALL_SQL,
    GAPS_SQL,
    LAST_POSITION_SQL,
    ROWS_SQL,
    SCHEMA,
    SCHEMA_VERSION,
    STORED_SQL,
)
from plait.events.stores.sqlite_writes import Writes
from plait.events.subscription import Signal
from plait.events.types import Event

__all__ = ["SqliteStore"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SqliteStore(SqlitePruning, PerAppendStore):
    """An event store in one SQLite file (created if missing, unless ``read_only``).

    ``read_only`` opens an existing file for reading only (``plait log``, ``verify``,
    ``audit``...): nothing is written, not even the write-ahead log's index, so a store on a
    read-only mount or directory can be read (``sqlite_files.py``); a write is refused.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "FULL",
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        clock: Clock = utc_now,
        busy_timeout_sec: float = 30.0,
        read_only: bool = False,
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        self.path = Path(path)
        self.read_only = read_only
        """Whether the store was opened for reading only."""
        self._lock = threading.RLock()
        opening = open_read_only if read_only else open_writable
        self._db = opening(self.path, busy_timeout_sec)  # WAL mode, when written
        try:
            with self._errors():
                if not read_only:
                    self._db.execute("PRAGMA secure_delete=ON")  # deleted content is overwritten
                    self._db.execute(f"PRAGMA synchronous={synchronous}")
                self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout_sec * 1000)}")
                self._migrate()
        except BaseException:
            self._db.close()
            raise
        self._writes = Writes(self._db, self._lock, self._error, self.path)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.DatabaseError) -> StoreError:
        """The store's error for one of SQLite's."""
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return StoreUnavailableError(f"{self.path}: not a readable plait store ({text})")
        if "Could not decode to UTF-8" in text:  # a text column's bytes were changed
            return StoreError(f"{self.path}: damaged: a row's text is not UTF-8 ({text})")
        if self.read_only and "readonly" in text:
            return StoreError(f"{self.path}: opened read-only, so it cannot be written ({text})")
        return StoreError(f"{self.path}: {text}")

    def _migrate(self) -> None:
        ((version,),) = self._query("PRAGMA user_version", ())
        if version > SCHEMA_VERSION:
            raise StoreUnavailableError(
                f"{self.path}: store schema version {version} is newer than this plait "
                f"understands ({SCHEMA_VERSION}); upgrade plait"
            )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:  # an older layout is read as it is, moved into temporary tables
            self._stand_in_for_missing_tables()
            layout = layout_of(self._db)
            if layout < SCHEMA_VERSION:
                move(self._db, layout, temporary=True)
            return
        with self._transaction() as db:
            # Again under the write lock: another process may have moved it meanwhile.
            ((version,),) = db.execute("PRAGMA user_version").fetchall()
            if version < SCHEMA_VERSION:
                layout = layout_of(db)
                if layout < SCHEMA_VERSION:
                    move(db, layout)  # (sqlite_legacy.py)
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _stand_in_for_missing_tables(self) -> None:
        """Give a read-only open of an older store an empty temporary table for each table a
        later layout added (the leases, the inbox): it held none of their rows, and reads of
        them find none rather than failing (an open for writing moves it instead)."""
        present = {name for (name,) in self._query("SELECT name FROM sqlite_master", ())}
        for statement in SCHEMA.split(";"):
            words = statement.split()
            if words[:2] == ["CREATE", "TABLE"] and words[5] not in present:
                self._db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))

    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        return self._writes.append(stream, expected_seq, prepare, epoch)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: SQLite's write lock, across processes)."""
        with self._lock, self._errors():
            try:
                begin(self._db)
                yield self._db
            except BaseException:
                rollback(self._db)
                raise
            self._db.execute("COMMIT")

    # Lease times are the machine's wall clock: every process sharing the file runs on it.

    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        leases = []
        with self._transaction() as db:
            now = time.time()
            for stream in streams:
                found = db.execute(
                    "SELECT owner, epoch, expires FROM leases WHERE stream = ?", (stream,)
                ).fetchone()
                holder, epoch, expires = taken(found or (None, 0, 0.0), owner, now, lease_sec)
                if holder == owner:
                    db.execute(
                        "INSERT OR REPLACE INTO leases (stream, owner, epoch, expires) "
                        "VALUES (?, ?, ?, ?)",
                        (stream, owner, epoch, expires),
                    )
                leases.append(Lease(stream, holder, int(epoch), expires - now))
        return leases

    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        # Only the leases asked for, at their epochs, and never one ended on purpose (ENDED).
        with self._transaction() as db:
            rows = db.execute(
                "UPDATE leases SET expires = ? FROM json_each(?) AS held "
                "WHERE leases.stream = held.key AND leases.epoch = held.value "
                "AND leases.owner = ? AND leases.expires <> ? RETURNING stream, epoch",
                (time.time() + lease_sec, json.dumps(held), owner, ENDED),
            ).fetchall()
        return {str(stream): int(epoch) for stream, epoch in rows}

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        with self._transaction() as db:
            cur = db.execute(
                "UPDATE leases SET owner = ?, expires = ? WHERE stream = ? AND owner = ? "
                "AND epoch = ?",
                (None if idle else owner, ENDED, stream, owner, epoch),
            )
        return cur.rowcount > 0

    def _leases(self, stream: str | None) -> list[Lease]:
        where = "" if stream is None else " WHERE stream = ?"
        now = time.time()
        rows = self._query(
            "SELECT stream, owner, epoch, expires FROM leases" + where + " ORDER BY stream",
            () if stream is None else (stream,),
        )
        return [Lease(str(s), o, int(e), float(x) - now) for s, o, e, x in rows]

    def _put_command(self, stream: str, data: bytes) -> int:
        with self._transaction() as db:
            cur = db.execute("INSERT INTO inbox (stream, data) VALUES (?, ?)", (stream, data))
        self._commanded.notify()
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        where = "" if streams is None else f" WHERE stream IN ({', '.join('?' * len(streams))})"
        rows = self._query(
            "SELECT id, stream, data FROM inbox" + where + " ORDER BY id", tuple(streams or ())
        )
        return [(int(i), str(s), bytes(d)) for i, s, d in rows]

    def _drop_commands(self, taken: list[tuple[str, int]]) -> None:
        with self._transaction() as db:
            db.executemany("DELETE FROM inbox WHERE stream = ? AND id = ?", taken)

    def _query(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        with self._lock, self._errors():
            return self._db.execute(sql, params).fetchall()

    def _head(self, stream: str) -> tuple[int, bytes]:
        rows = self._query("SELECT last_seq, last_hash FROM streams WHERE stream = ?", (stream,))
        if not rows:
            return 0, GENESIS_HASH
        seq, digest = rows[0]
        return int(seq), bytes(digest)

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Any]:
        end = 2**62 if upto is None else upto
        return self._query(ROWS_SQL, (stream, after, end, -1 if limit is None else limit))

    def _all_rows(self, after_position: int, limit: int | None, settled: bool) -> list[Any]:
        most = (2**62, -1) if limit is None else (limit, limit + 1)
        return self._query(ALL_SQL, (after_position, *most))

    def space(self) -> Space:
        ((pages,),) = self._query("PRAGMA page_count", ())
        ((free,),) = self._query("PRAGMA freelist_count", ())
        ((size,),) = self._query("PRAGMA page_size", ())
        wal = self.path.with_name(self.path.name + "-wal")
        total = int(pages) * int(size) + (wal.stat().st_size if wal.exists() else 0)
        return Space(total, int(free) * int(size), f"sqlite3 {self.path} VACUUM")

    def stored_bytes(self, stream: str) -> int | None:
        ((stored,),) = self._query(STORED_SQL, (stream,))
        return int(stored)

    def _last_position(self) -> int:
        ((last,),) = self._query(LAST_POSITION_SQL, ())
        return int(last)

    def _streams(self) -> list[tuple[str, int]]:
        rows = self._query("SELECT stream, last_seq FROM streams ORDER BY created", ())
        return [(str(stream), int(last)) for stream, last in rows]

    def _position_gap(self) -> tuple[int, int] | None:
        # As many events as the last position: dense.
        ((count,),) = self._query("SELECT total(count) FROM appends", ())
        if count == self._last_position():
            return None
        found = self._query(GAPS_SQL + " LIMIT 1", ())
        return (int(found[0][0]), int(found[0][1])) if found else None

    def _blob(self, sha256: str) -> bytes | RedactedMarker | None:
        # The key and size as the row holds them, not as the key's index repeats it.
        rows = self._query(
            "SELECT t.sha256, t.size, t.data FROM blobs AS i CROSS JOIN blobs AS t "
            "ON t.rowid = i.rowid WHERE i.sha256 = ?",
            (sha256,),
        )
        if not rows:
            return find_content(self._query, sha256)
        key, size, data = rows[0]
        if key != sha256 or (data is not None and size != len(data)):
            raise StoreError(
                f"{self.path}: damaged: {_blob_row(sha256)} does not say what it holds"
            )
        return REDACTED if data is None else bytes(data)

    def _redact(self, sha256: str) -> bool:
        with self._transaction() as db:
            deleted = self._delete(db, "UPDATE blobs SET data = NULL WHERE sha256 = ?", sha256)
        with self._lock, self._errors():
            # Its old pages leave the write-ahead log too, so the file no longer holds it.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    def _redact_all(self, sha256s: list[str]) -> int:
        with self._transaction() as db:
            sql = "UPDATE blobs SET data = NULL WHERE sha256 = ? AND data IS NOT NULL"
            return sum(self._delete(db, sql, sha256) for sha256 in sha256s)

    def _delete(self, db: sqlite3.Connection, sql: str, sha256: str) -> bool:
        """Delete a blob's content by ``sql`` in ``blobs``, else in the row that keeps it;
        return whether either held it."""
        if db.execute(sql, (sha256,)).rowcount > 0:
            return True
        return delete_content(db, sha256)

    def scrub(self) -> str | None:
        # secure_delete zeroed the deleted content in the pages written since; the old pages
        # still sit in the file until a checkpoint, and old frames in the write-ahead log
        # until it is truncated. A reader in another process holds the log: nothing to do
        # but say so.
        with self._lock, self._errors():
            ((busy, _, _),) = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        if busy:
            return (
                f"{self.path}: the write-ahead log still holds old pages: another process "
                "reads the store; run again once it is idle (plait forget is idempotent)"
            )
        return None

    def check_file(self, full: bool = False) -> str | None:
        rows = self._query(f"PRAGMA {'integrity_check' if full else 'quick_check'}", ())
        found = [str(row[0]) for row in rows]
        if found == ["ok"]:
            blobs = self._query("SELECT sha256, size, data FROM blobs NOT INDEXED", ())
            for sha256, size, data in blobs:  # a redacted blob keeps its key and size only
                if data is not None and (
                    hashlib.sha256(data).hexdigest() != sha256 or size != len(data)
                ):
                    return f"{self.path}: {_blob_row(sha256)} does not hold what it says"
            return None
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        return f"{self.path}: SQLite finds the file damaged: {'; '.join(found[:3])}{more}"

    def _data_version(self) -> int:
        rows = self._query("PRAGMA data_version", ())
        return int(rows[0][0])

    def _waiter(self) -> Waiter:
        return FileWaiter(self._data_version, self._appended)

    def _inbox_waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        local = self._commanded if also is None else Signal.any_of(self._commanded, also)
        return FileWaiter(self._data_version, local)  # any commit wakes it: no ``sessions``

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()


def _blob_row(sha256: str) -> str:
    """A blob row, as a message names it: its key may be damaged, so it is escaped."""
    return f"blob row sha256:{sha256.encode('unicode_escape').decode()}"
