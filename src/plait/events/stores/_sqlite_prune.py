"""``SqlitePruning``: how a SQLite store keeps the records of pruned sessions, removes them and
gives their room back (docs/storage.md#retention); ``plait.events._retention`` decides what goes.

This is an internal part of ``SqliteStore``, not part of the public API.

The deletion and the records that account for it are one transaction, so a reader never
finds a gap that no record covers. Pages then go back to the file system where the file was
created with ``auto_vacuum=INCREMENTAL`` (new stores are, ``_sqlite_files.py``); an older file
keeps them free inside it until ``VACUUM``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from plait._errors import ConcurrencyError, StoreError
from plait.events._pruned import COLUMNS, PrunedSession, record_of, row_of
from plait.events._pruning import Pruning
from plait.events.stores._sqlite_link import Link
from plait.events.stores._sqlite_writes import Writes

__all__ = ["PRUNED_TABLE", "SqlitePruning"]

PRUNED_TABLE = """
CREATE TABLE IF NOT EXISTS pruned (
    id          INTEGER PRIMARY KEY,
    stream      TEXT    NOT NULL,
    last_seq    INTEGER NOT NULL,
    last_hash   BLOB    NOT NULL,
    events      INTEGER NOT NULL,
    positions   TEXT    NOT NULL,
    last_at     TEXT    NOT NULL,
    pruned_at   TEXT    NOT NULL,
    rule        TEXT    NOT NULL,
    freed       INTEGER NOT NULL,
    closed_at   TEXT,
    signed_seq  INTEGER NOT NULL,
    signed_hash BLOB    NOT NULL
)"""
"""One row per session pruned (``plait.events._pruned.COLUMNS``); made by a store's first
prune (reads of a store never pruned find none), so stores of every schema version get it
without a migration."""


def pruned_records(db: sqlite3.Connection, stream: str | None) -> list[PrunedSession]:
    """The ``pruned`` table's records (``stream``'s only), oldest first; none if it is not
    there (a store never pruned, made before it existed)."""
    where = "" if stream is None else " WHERE stream = ?"
    try:
        rows = db.execute(
            f"SELECT {COLUMNS} FROM pruned{where} ORDER BY id", () if stream is None else (stream,)
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    return [record_of(row) for row in rows]


_DELETE_ROWS_SQL = (
    "DELETE FROM appends WHERE stream = (SELECT key FROM names WHERE name = ?) RETURNING position"
)


def remove_sessions(
    db: sqlite3.Connection, records: Sequence[PrunedSession], blobs: Sequence[str]
) -> None:
    """In the caller's write transaction: remove each record's session (its rows, and where
    their content was found, its head, lease and commands), if its head is still the one the
    record names and no live lease holds it (else raise, for the caller to roll
    back), store the records, and delete ``blobs``."""
    db.execute(PRUNED_TABLE)
    now = time.time()  # lease times are the machine's wall clock (``SqliteStore``)
    marks = ", ".join("?" * len(COLUMNS.split(",")))
    for record in records:
        stream = record.stream
        head = db.execute(
            "SELECT last_seq, last_hash FROM streams WHERE stream = ?", (stream,)
        ).fetchone()
        if head is None or (int(head[0]), bytes(head[1])) != (record.last_seq, record.last_hash):
            raise ConcurrencyError(stream, record.last_seq, 0 if head is None else int(head[0]))
        lease = db.execute("SELECT owner, expires FROM leases WHERE stream = ?", (stream,))
        found = lease.fetchone()
        if found is not None and found[0] is not None and float(found[1]) > now:
            raise StoreError(f"session {stream}: its lease is held by {found[0]}: not pruned")
        gone = db.execute(_DELETE_ROWS_SQL, (stream,)).fetchall()
        positions = json.dumps([position for (position,) in gone])
        sql = "DELETE FROM contents WHERE position IN (SELECT value FROM json_each(?))"
        db.execute(sql, (positions,))
        for kept in ("streams", "leases", "inbox"):
            db.execute(f"DELETE FROM {kept} WHERE stream = ?", (stream,))
        db.execute(f"INSERT INTO pruned ({COLUMNS}) VALUES ({marks})", row_of(record))
    db.executemany("DELETE FROM blobs WHERE sha256 = ?", [(sha,) for sha in blobs])


def reclaim(db: sqlite3.Connection, path: Path) -> str:
    """Give the free pages back to the file system if the file allows it; else say how."""
    ((mode,),) = db.execute("PRAGMA auto_vacuum").fetchall()
    if int(mode) != 2:  # NONE (or FULL, which gives them back at each commit)
        return "" if int(mode) == 1 else f"sqlite3 {path} VACUUM"
    # Each step of the statement frees one page, and ``execute`` takes one step: the script
    # runs it to the end.
    db.executescript("PRAGMA incremental_vacuum")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the file shrinks here
    return ""


class SqlitePruning(Pruning):
    """A SQLite store's records of pruned sessions, in its ``pruned`` table, and their
    removal."""

    def __init__(self, link: Link, writes: Writes) -> None:
        """``writes``: the store's, which remember the heads of sessions a prune removes."""
        super().__init__()
        self._link = link
        self._writes = writes

    def records(self, stream: str | None = None) -> list[PrunedSession]:
        with self._link.lock:
            return pruned_records(self._link.db, stream)

    def _remove(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        with self._link.lock:
            self._writes.forget()  # the heads it remembers, of sessions about to go
            with self._link.transaction() as db:
                remove_sessions(db, records, blobs)

    def _reclaim(self) -> str:
        with self._link.lock:
            return reclaim(self._link.db, self._link.path)
