"""``Link``: the connection of a ``SqliteStore``, which the store and each of its parts use.

This is an internal part of ``SqliteStore``, not part of the public API.

One connection per store object, guarded by a lock, serves every thread; SQLite's errors on it
are said as the store's (``StoreError``, naming the file).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plait._errors import StoreError, StoreUnavailableError
from plait.events.stores._sqlite_files import begin, rollback

__all__ = ["Link"]


class Link:
    """The store's connection to its file, and the lock each use of it holds."""

    def __init__(self, db: sqlite3.Connection, path: Path, read_only: bool) -> None:
        self.db = db
        """The connection: use it holding ``lock``."""
        self.lock = threading.RLock()
        self.path = path
        """The store's file, for messages."""
        self.read_only = read_only
        """Whether the file was opened for reading only."""

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Raise SQLite's errors in the block as the store's (``error``)."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise self.error(exc) from exc

    def error(self, exc: sqlite3.DatabaseError) -> StoreError:
        """The store's error for one of SQLite's."""
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return StoreUnavailableError(f"{self.path}: not a readable plait store ({text})")
        if "Could not decode to UTF-8" in text:  # a text column's bytes were changed
            return StoreError(f"{self.path}: damaged: a row's text is not UTF-8 ({text})")
        if self.read_only and "readonly" in text:
            return StoreError(f"{self.path}: opened read-only, so it cannot be written ({text})")
        return StoreError(f"{self.path}: {text}")

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """The rows ``sql`` answers with ``params``."""
        with self.lock, self.errors():
            return self.db.execute(sql, params).fetchall()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: SQLite's write lock, across processes),
        committed at the end of the block, rolled back if it raises."""
        with self.lock, self.errors():
            try:
                begin(self.db)
                yield self.db
            except BaseException:
                rollback(self.db)
                raise
            self.db.execute("COMMIT")

    def data_version(self) -> int:
        """SQLite's ``data_version``: it moves when another connection commits."""
        return int(self.query("PRAGMA data_version")[0][0])

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self.db.close()
