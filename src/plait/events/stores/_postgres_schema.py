"""What opening a ``PostgresStore`` creates, and brings up to date, in its schema.

This is an internal part of ``PostgresStore``, not part of the public API.

Tables and functions are created when anything is missing (``IF NOT EXISTS``, ``OR REPLACE``),
under an advisory lock so two processes opening a fresh database do not race; a complete
schema is left alone, so a role without ``CREATE`` rights can use one an administrator
prepared. A store of an earlier layout is brought to this one (``postgres_legacy``). The
functions count positions from a base (``postgres_sql.functions``), raised when the store was
restored into a server whose transaction ids are younger than its positions.
"""

from __future__ import annotations

from collections.abc import Mapping

from psycopg import sql

from plait.events.stores._postgres_legacy import MOVE
from plait.events.stores._postgres_link import Connection
from plait.events.stores._postgres_sql import (
    APPEND_SIGNATURE,
    DDL,
    POSITION_BITS,
    SCHEMA_VERSION,
    functions,
)

__all__ = ["open_schema"]


def open_schema(conn: Connection, schema: str, key: int, queries: Mapping[str, bytes]) -> str:
    """Create what is missing of ``schema`` (under advisory lock ``key``); return its layout's
    version (a newer one than this plait's is left as it is, for the caller to refuse)."""
    args = {"schema": schema, "function": APPEND_SIGNATURE}
    found = conn.execute(queries["layout"], args).fetchone()
    assert found is not None
    complete, legacy = found[:2] == (6, True), bool(found[2])
    if not complete or legacy:
        with conn.transaction():
            conn.execute(queries["lock"], (key,))
            _execute(conn, schema, DDL)
            if legacy and _still(conn, schema):
                _execute(conn, schema, MOVE)
    (version,) = conn.execute(queries["version"]).fetchone() or ("0",)
    if int(version) <= SCHEMA_VERSION and not (complete and _base(conn, queries)[1]):
        with conn.transaction():
            conn.execute(queries["lock"], (key,))
            _execute(conn, schema, functions(_base(conn, queries)[0]))
    return str(version)


def _base(conn: Connection, queries: Mapping[str, bytes]) -> tuple[int, bool]:
    """The base the functions must count positions from, and whether they do: not if none was
    set yet, or if the store was restored into a server whose transaction ids are younger
    than its positions (new ones must still come after every one there)."""
    found = conn.execute(queries["positions"]).fetchone()
    assert found is not None
    base, xid, last = (None if n is None else int(n) for n in found)
    assert xid is not None and last is not None
    if base is not None and (xid + base) << POSITION_BITS > last:
        return base, True
    return max(base or 0, (last >> POSITION_BITS) + 1 - xid), False


def _still(conn: Connection, schema: str) -> bool:
    """Whether an earlier layout's ``events`` is still there (another process may have moved
    it while this one waited for the lock)."""
    found = conn.execute("SELECT to_regclass(format('%%I.events', %s::text))", (schema,))
    return (found.fetchone() or (None,))[0] is not None


def _execute(conn: Connection, schema: str, statements: list[str]) -> None:
    for statement in statements:
        conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)))
