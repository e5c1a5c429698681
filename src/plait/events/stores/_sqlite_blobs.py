"""``SqliteBlobs``: a SQLite store's blobs (``plait.events._blobstore``), in its ``blobs`` table
or, small ones, in the row of the append that wrote them (``sqlite_content``).

This is an internal part of ``SqliteStore``, not part of the public API.

The file is opened with ``secure_delete`` (``SqliteStore``): deleted content is overwritten in
the pages written since; ``scrub`` then lets the old pages leave the write-ahead log.
"""

from __future__ import annotations

import sqlite3

from plait._errors import StoreError
from plait.events._blobstore import REDACTED, BlobStore, RedactedMarker
from plait.events.stores._sqlite_content import delete as delete_content
from plait.events.stores._sqlite_content import find as find_content
from plait.events.stores._sqlite_link import Link

__all__ = ["SqliteBlobs", "blob_row"]


def blob_row(sha256: str) -> str:
    """A blob row, as a message names it: its key may be damaged, so it is escaped."""
    return f"blob row sha256:{sha256.encode('unicode_escape').decode()}"


class SqliteBlobs(BlobStore):
    """A SQLite store's blobs."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self._link = link

    def state(self, sha256: str) -> bytes | RedactedMarker | None:
        # The key and size as the row holds them, not as the key's index repeats it.
        rows = self._link.query(
            "SELECT t.sha256, t.size, t.data FROM blobs AS i CROSS JOIN blobs AS t "
            "ON t.rowid = i.rowid WHERE i.sha256 = ?",
            (sha256,),
        )
        if not rows:
            return find_content(self._link.query, sha256)
        key, size, data = rows[0]
        if key != sha256 or (data is not None and size != len(data)):
            raise StoreError(
                f"{self._link.path}: damaged: {blob_row(sha256)} does not say what it holds"
            )
        return REDACTED if data is None else bytes(data)

    def _redact(self, sha256: str) -> bool:
        with self._link.transaction() as db:
            deleted = self._delete(db, "UPDATE blobs SET data = NULL WHERE sha256 = ?", sha256)
        # Its old pages leave the write-ahead log too, so the file no longer holds it.
        self._link.query("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    def _redact_all(self, sha256s: list[str]) -> int:
        with self._link.transaction() as db:
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
        ((busy, _, _),) = self._link.query("PRAGMA wal_checkpoint(TRUNCATE)")
        if busy:
            return (
                f"{self._link.path}: the write-ahead log still holds old pages: another "
                "process reads the store; run again once it is idle (plait forget is idempotent)"
            )
        return None
