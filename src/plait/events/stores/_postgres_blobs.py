"""``PostgresBlobs``: a PostgreSQL store's blobs (``plait.events._blobstore``), in its schema's
``blobs`` table.

This is an internal part of ``PostgresStore``, not part of the public API.

PostgreSQL keeps a deleted row's old version in the table's files until a vacuum, and a vacuum
keeps those a transaction older than the deletion may still read: ``scrub`` waits for them.
"""

from __future__ import annotations

import time

from plait.events._blobstore import REDACTED, BlobStore, RedactedMarker
from plait.events.stores._postgres_calls import Calls
from plait.events.stores._postgres_link import Connection

__all__ = ["SCRUB_WAIT_SEC", "PostgresBlobs"]

SCRUB_WAIT_SEC = 30.0
"""How long ``scrub`` waits for older transactions to end before it says it could not."""


class PostgresBlobs(BlobStore):
    """A PostgreSQL store's blobs."""

    def __init__(self, calls: Calls) -> None:
        super().__init__()
        self._calls = calls

    def state(self, sha256: str) -> bytes | RedactedMarker | None:
        rows = self._calls.query("blob", (sha256,))
        if not rows:
            return None
        return REDACTED if rows[0][0] is None else bytes(rows[0][0])

    def states(self, sha256s: list[str]) -> dict[str, bytes | RedactedMarker]:
        rows = self._calls.query("blobs", (sha256s,)) if sha256s else []
        return {key: REDACTED if data is None else bytes(data) for key, data in rows}

    def _redact(self, sha256: str) -> bool:
        redact = self._calls.sql["redact"]
        return self._calls.run(lambda conn: conn.execute(redact, (sha256,)).rowcount > 0)

    def _redact_all(self, sha256s: list[str]) -> int:
        redact = self._calls.sql["redact_all"]
        return self._calls.run(lambda conn: conn.execute(redact, (sha256s,)).rowcount)

    def scrub(self) -> str | None:
        """VACUUM FULL the blobs and the inbox once every transaction older than now, which
        may still see rows deleted before, has ended: until then, PostgreSQL keeps them."""
        sql = self._calls.sql
        ((now,),) = self._calls.run(lambda conn: conn.execute(sql["xid"]).fetchall())
        deadline = time.monotonic() + SCRUB_WAIT_SEC
        while True:
            older = self._calls.run(lambda conn: conn.execute(sql["older"], (now,)).fetchone())
            if older is None or time.monotonic() >= deadline:
                break
            time.sleep(0.1)  # a transaction of another process: nothing here wakes on its end

        def vacuum(conn: Connection) -> None:
            conn.execute(sql["scrub_blobs"])  # the connection commits by itself: as
            conn.execute(sql["scrub_inbox"])  # VACUUM must, outside a transaction

        self._calls.run(vacuum)
        if older is not None:
            pid, running = older
            return (
                f"{self._calls.url} (schema {self._calls.schema}): a transaction older than "
                f"the erasure (pid {pid}, running for {running}) may still read the deleted "
                "rows, so PostgreSQL keeps them in the table's files: run plait forget again "
                "once it ends"
            )
        return None
