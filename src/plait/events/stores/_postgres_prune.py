"""``PostgresPruning``: how a PostgreSQL store keeps the records of pruned sessions and removes
them (docs/storage.md#retention); ``plait.events._retention`` decides what goes.

This is an internal part of ``PostgresStore``, not part of the public API.

The deletion and the records that account for it are one transaction, holding each session's
head and lease rows: no append of it lands between the check of its head and its removal, and
two prunes take turns (an advisory lock).
PostgreSQL keeps deleted rows in its tables' files until a vacuum; the report says which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from psycopg import sql

from plait._errors import ConcurrencyError, StoreError
from plait.events._pruned import COLUMNS, PrunedSession, record_of, row_of
from plait.events._pruning import Pruning
from plait.events.stores._postgres_calls import Calls
from plait.events.stores._postgres_link import Connection

__all__ = ["PRUNED_TABLE", "PostgresPruning", "vacuum_hint"]

PRUNED_TABLE = (
    "CREATE TABLE IF NOT EXISTS {s}.pruned (id BIGSERIAL PRIMARY KEY, stream TEXT NOT NULL, "
    "last_seq BIGINT NOT NULL, last_hash BYTEA NOT NULL, events BIGINT NOT NULL, "
    "positions TEXT NOT NULL, last_at TEXT NOT NULL, pruned_at TEXT NOT NULL, "
    "rule TEXT NOT NULL, freed BIGINT NOT NULL, closed_at TEXT, signed_seq BIGINT NOT NULL, "
    "signed_hash BYTEA NOT NULL)"
)
"""One row per session pruned (``plait.events._pruned.COLUMNS``)."""

_NOW = "extract(epoch FROM clock_timestamp())::float8"  # the leases' clock (postgres_sql)

_QUERIES = {
    "exists": "SELECT to_regclass(format('%%I.pruned', %s::text)) IS NOT NULL",
    "records": f"SELECT {COLUMNS} FROM {{s}}.pruned "
    "WHERE %(stream)s::text IS NULL OR stream = %(stream)s ORDER BY id",
    "lock": "SELECT pg_advisory_xact_lock(%s)",
    "head": "SELECT last_seq, last_hash FROM {s}.streams WHERE stream = %s FOR UPDATE",
    "lease": f"SELECT owner, expires > {_NOW} FROM {{s}}.leases WHERE stream = %s FOR UPDATE",
    "insert": f"INSERT INTO {{s}}.pruned ({COLUMNS}) VALUES ("
    + ", ".join(["%s"] * len(COLUMNS.split(",")))
    + ")",
    "blobs": "DELETE FROM {s}.blobs WHERE sha256 = ANY(%s)",
}

_TABLES = ("appends", "streams", "leases", "inbox")
"""What a session's rows are in."""


def _sql(name: str, schema: str) -> sql.Composed:
    return sql.SQL(_QUERIES[name]).format(s=sql.Identifier(schema))


def pruned_records(conn: Connection, schema: str, stream: str | None) -> list[PrunedSession]:
    """The ``pruned`` table's records (``stream``'s only), oldest first."""
    found = conn.execute(_sql("exists", schema), (schema,)).fetchone()
    if found is None or not found[0]:  # an older store, never pruned
        return []
    rows = conn.execute(_sql("records", schema), {"stream": stream}, binary=True).fetchall()
    return [record_of(row) for row in rows]


def remove_sessions(
    conn: Connection,
    schema: str,
    key: int,
    records: Sequence[PrunedSession],
    blobs: Sequence[str],
) -> None:
    """In one transaction: remove each record's session, if its head is still the one the
    record names and no live lease holds it (else raise: nothing removed), store the records,
    and delete ``blobs``."""
    table = sql.SQL(PRUNED_TABLE).format(s=sql.Identifier(schema))
    with conn.transaction():
        conn.execute(table)
        conn.execute(_sql("lock", schema), (key,))
        for record in records:
            stream = record.stream
            head = conn.execute(_sql("head", schema), (stream,), binary=True).fetchone()
            if head is None or (int(head[0]), bytes(head[1])) != (
                record.last_seq,
                record.last_hash,
            ):
                raise ConcurrencyError(stream, record.last_seq, 0 if head is None else head[0])
            lease = conn.execute(_sql("lease", schema), (stream,)).fetchone()
            if lease is not None and lease[0] is not None and lease[1]:
                raise StoreError(f"session {stream}: its lease is held by {lease[0]}: not pruned")
            for name in _TABLES:
                conn.execute(
                    sql.SQL("DELETE FROM {s}.{t} WHERE stream = %s").format(
                        s=sql.Identifier(schema), t=sql.Identifier(name)
                    ),
                    (stream,),
                )
            conn.execute(_sql("insert", schema), row_of(record))
        if blobs:
            conn.execute(_sql("blobs", schema), (list(blobs),))


def vacuum_hint(schema: str) -> str:
    """What gives the room of deleted rows back to the file system."""
    return "VACUUM FULL " + ", ".join(f"{schema}.{t}" for t in ("appends", "streams", "blobs"))


class PostgresPruning(Pruning):
    """A PostgreSQL store's records of pruned sessions, in its schema's ``pruned`` table, and
    their removal."""

    def __init__(self, calls: Calls, key: int, forget: Callable[[str], object]) -> None:
        """``key``: the advisory lock two prunes of the schema take turns on; ``forget``: what
        the store must forget of a session removed (the head it wrote)."""
        super().__init__()
        self._calls = calls
        self._key = key
        self._forget = forget

    def records(self, stream: str | None = None) -> list[PrunedSession]:
        schema = self._calls.schema
        return self._calls.run(lambda conn: pruned_records(conn, schema, stream))

    def _remove(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        for record in records:
            self._forget(record.stream)
        schema, key = self._calls.schema, self._key
        self._calls.run(lambda conn: remove_sessions(conn, schema, key, records, blobs))

    def _reclaim(self) -> str:
        return vacuum_hint(self._calls.schema)
