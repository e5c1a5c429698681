"""``SqliteLeases``: the leases of the processes sharing a SQLite store (``plait.events._leases``).

This is an internal part of ``SqliteStore``, not part of the public API.

Lease times are the machine's wall clock: every process sharing the file runs on it.
"""

from __future__ import annotations

import json
import time

from plait.events._leases import ENDED, Lease, Leases, taken
from plait.events.stores._sqlite_link import Link

__all__ = ["SqliteLeases"]


class SqliteLeases(Leases):
    """A SQLite store's leases, in its ``leases`` table."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        leases = []
        with self._link.transaction() as db:
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
        with self._link.transaction() as db:
            rows = db.execute(
                "UPDATE leases SET expires = ? FROM json_each(?) AS held "
                "WHERE leases.stream = held.key AND leases.epoch = held.value "
                "AND leases.owner = ? AND leases.expires <> ? RETURNING stream, epoch",
                (time.time() + lease_sec, json.dumps(held), owner, ENDED),
            ).fetchall()
        return {str(stream): int(epoch) for stream, epoch in rows}

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        with self._link.transaction() as db:
            cur = db.execute(
                "UPDATE leases SET owner = ?, expires = ? WHERE stream = ? AND owner = ? "
                "AND epoch = ?",
                (None if idle else owner, ENDED, stream, owner, epoch),
            )
        return cur.rowcount > 0

    def _leases(self, stream: str | None) -> list[Lease]:
        where = "" if stream is None else " WHERE stream = ?"
        now = time.time()
        rows = self._link.query(
            "SELECT stream, owner, epoch, expires FROM leases" + where + " ORDER BY stream",
            () if stream is None else (stream,),
        )
        return [Lease(str(s), o, int(e), float(x) - now) for s, o, e, x in rows]
