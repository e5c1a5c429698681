"""``SqliteStore``: the embedded default; one file, WAL, durable commits.

Its rows are a row per append, of encoding 3, as PostgreSQL's are (``_sqlite_schema.py``). One
connection per store object, guarded by a lock, serves every thread; appends made while another
is being written are written with it (``_sqlite_writes.py``). ``BEGIN IMMEDIATE``
and SQLite's file locks serialize writers across processes, and the ``streams`` head row turns a
lost race into a ``ConcurrencyError`` rather than a fork of the chain. Positions are assigned as
``max + 1`` under the write lock, so they are dense and commit-ordered.

The store's parts (its blobs, leases, inbox and pruning: ``_sqlite_blobs.py``,
``_sqlite_leases.py``, ``_sqlite_inbox.py``, ``_sqlite_prune.py``) use the store's connection
through its ``Link`` (``_sqlite_link.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from plait._errors import StoreUnavailableError
from plait.events._blobs import DEFAULT_BLOB_THRESHOLD
from plait.events._codec import GENESIS_HASH
from plait.events._per_append import PerAppendStore
from plait.events._space import Space
from plait.events._store import Clock, PreparedAppend, Waiter, utc_now
from plait.events._types import Event
from plait.events.stores._sqlite_blobs import SqliteBlobs, blob_row
from plait.events.stores._sqlite_files import FileWaiter, open_read_only, open_writable
from plait.events.stores._sqlite_inbox import SqliteInbox
from plait.events.stores._sqlite_leases import SqliteLeases
from plait.events.stores._sqlite_legacy import layout_of, move
from plait.events.stores._sqlite_link import Link
from plait.events.stores._sqlite_prune import SqlitePruning
from plait.events.stores._sqlite_schema import (
    ALL_SQL,
    GAPS_SQL,
    LAST_POSITION_SQL,
    ROWS_SQL,
    SCHEMA,
    SCHEMA_VERSION,
    STORED_SQL,
)
from plait.events.stores._sqlite_writes import Writes

__all__ = ["SqliteStore"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


class SqliteStore(PerAppendStore):
    """An event store in one SQLite file (created if missing, unless ``read_only``).

    ``read_only`` opens an existing file for reading only (``plait log``, ``verify``,
    ``audit``...): nothing is written, not even the write-ahead log's index, so a store on a
    read-only mount or directory can be read (``_sqlite_files.py``); a write is refused.
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
        opening = open_read_only if read_only else open_writable
        db = opening(self.path, busy_timeout_sec)  # WAL mode, when written
        self._link = link = Link(db, self.path, read_only)
        try:
            with link.errors():
                if not read_only:
                    db.execute("PRAGMA secure_delete=ON")  # deleted content is overwritten
                    db.execute(f"PRAGMA synchronous={synchronous}")
                db.execute(f"PRAGMA busy_timeout={int(busy_timeout_sec * 1000)}")
                self._migrate()
        except BaseException:
            db.close()
            raise
        self._writes = Writes(db, link.lock, link.error, self.path)
        self.blobs = SqliteBlobs(link)
        self.leases = SqliteLeases(link)
        self.inbox = SqliteInbox(link)
        self.pruning = SqlitePruning(link, self._writes)

    def _migrate(self) -> None:
        ((version,),) = self._link.query("PRAGMA user_version")
        if version > SCHEMA_VERSION:
            raise StoreUnavailableError(
                f"{self.path}: store schema version {version} is newer than this plait "
                f"understands ({SCHEMA_VERSION}); upgrade plait"
            )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:  # an older layout is read as it is, moved into temporary tables
            self._stand_in_for_missing_tables()
            layout = layout_of(self._link.db)
            if layout < SCHEMA_VERSION:
                move(self._link.db, layout, temporary=True)
            return
        with self._link.transaction() as db:
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
        present = {name for (name,) in self._link.query("SELECT name FROM sqlite_master")}
        for statement in SCHEMA.split(";"):
            words = statement.split()
            if words[:2] == ["CREATE", "TABLE"] and words[5] not in present:
                self._link.db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))

    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        return self._writes.append(stream, expected_seq, prepare, epoch)

    def _head(self, stream: str) -> tuple[int, bytes]:
        rows = self._link.query(
            "SELECT last_seq, last_hash FROM streams WHERE stream = ?", (stream,)
        )
        if not rows:
            return 0, GENESIS_HASH
        seq, digest = rows[0]
        return int(seq), bytes(digest)

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Any]:
        end = 2**62 if upto is None else upto
        return self._link.query(ROWS_SQL, (stream, after, end, -1 if limit is None else limit))

    def _all_rows(self, after_position: int, limit: int | None, settled: bool) -> list[Any]:
        most = (2**62, -1) if limit is None else (limit, limit + 1)
        return self._link.query(ALL_SQL, (after_position, *most))

    def space(self) -> Space:
        ((pages,),) = self._link.query("PRAGMA page_count")
        ((free,),) = self._link.query("PRAGMA freelist_count")
        ((size,),) = self._link.query("PRAGMA page_size")
        wal = self.path.with_name(self.path.name + "-wal")
        total = int(pages) * int(size) + (wal.stat().st_size if wal.exists() else 0)
        return Space(total, int(free) * int(size), f"sqlite3 {self.path} VACUUM")

    def stored_bytes(self, stream: str) -> int | None:
        ((stored,),) = self._link.query(STORED_SQL, (stream,))
        return int(stored)

    def _last_position(self) -> int:
        ((last,),) = self._link.query(LAST_POSITION_SQL)
        return int(last)

    def _streams(self) -> list[tuple[str, int]]:
        rows = self._link.query("SELECT stream, last_seq FROM streams ORDER BY created")
        return [(str(stream), int(last)) for stream, last in rows]

    def _position_gap(self) -> tuple[int, int] | None:
        # As many events as the last position: dense.
        ((count,),) = self._link.query("SELECT total(count) FROM appends")
        if count == self._last_position():
            return None
        found = self._link.query(GAPS_SQL + " LIMIT 1")
        return (int(found[0][0]), int(found[0][1])) if found else None

    def _position_gaps(self) -> list[tuple[int, int]]:
        found = self._link.query(GAPS_SQL)
        return [(int(before), int(after)) for before, after in found]

    def check_file(self, full: bool = False) -> str | None:
        rows = self._link.query(f"PRAGMA {'integrity_check' if full else 'quick_check'}")
        found = [str(row[0]) for row in rows]
        if found == ["ok"]:
            blobs = self._link.query("SELECT sha256, size, data FROM blobs NOT INDEXED")
            for sha256, size, data in blobs:  # a redacted blob keeps its key and size only
                if data is not None and (
                    hashlib.sha256(data).hexdigest() != sha256 or size != len(data)
                ):
                    return f"{self.path}: {blob_row(sha256)} does not hold what it says"
            return None
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        return f"{self.path}: SQLite finds the file damaged: {'; '.join(found[:3])}{more}"

    def _waiter(self) -> Waiter:
        return FileWaiter(self._link.data_version, self._appended)

    def close(self) -> None:
        with self._link.lock:
            self._closed = True
            self._link.close()
