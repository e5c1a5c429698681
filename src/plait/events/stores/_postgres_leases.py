"""``PostgresLeases``: the leases of the processes sharing a PostgreSQL store
(``plait.events._leases``), timed by the server's clock.

This is an internal part of ``PostgresStore``, not part of the public API.
"""

from __future__ import annotations

from typing import Any

from plait.events._leases import Lease, Leases
from plait.events.stores._postgres_calls import Calls
from plait.events.stores._postgres_link import Connection

__all__ = ["PostgresLeases"]


class PostgresLeases(Leases):
    """A PostgreSQL store's leases, in its schema's ``leases`` table."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        args = {"streams": streams, "owner": owner, "sec": lease_sec}
        sql = self._calls.sql

        def acquire(conn: Connection) -> list[tuple[Any, ...]]:
            # Made again after a lost connection: the same owner keeps its epoch, so taking
            # a lease twice is taking it once.
            with conn.transaction():
                conn.execute(sql["acquire"], args)
                return conn.execute(sql["leases_of"], args).fetchall()

        found = self._calls.run(acquire)
        assert len(found) == len(streams)  # inserted, or there already
        return [_lease(row) for row in found]

    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        rows = self._calls.query("renew", (lease_sec, list(held), list(held.values()), owner))
        return {str(stream): int(epoch) for stream, epoch in rows}

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        args = (None if idle else owner, stream, owner, epoch)
        release = self._calls.sql["release"]
        return self._calls.run(lambda conn: conn.execute(release, args).rowcount > 0)

    def _leases(self, stream: str | None) -> list[Lease]:
        leases = self._calls.sql["leases"]
        rows = self._calls.run(lambda conn: conn.execute(leases, {"stream": stream}).fetchall())
        return [_lease(row) for row in rows]


def _lease(row: tuple[Any, ...]) -> Lease:
    stream, owner, epoch, remaining = row
    return Lease(str(stream), owner, int(epoch), float(remaining))
