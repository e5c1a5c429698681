"""``Calls``: how a ``PostgresStore`` and each of its parts call the server.

This is an internal part of ``PostgresStore``, not part of the public API.

The store's statements are rendered once for its schema (a statement composed anew for each
call costs an append 5% more) and made on its ``Link``, again after a lost connection where
that is safe (``postgres_link``); a statement the server refuses is a ``StoreError`` naming
the schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from plait._errors import StoreError
from plait.events.stores._postgres_link import Connection, Link, text_of

__all__ = ["Calls"]

T = TypeVar("T")


class Calls:
    """The statements of a store's schema, made on its link."""

    def __init__(self, link: Link, schema: str, queries: Mapping[str, str]) -> None:
        self.link = link
        self.url = link.url
        """The store's URL, its password masked, for messages."""
        self.schema = schema
        """The PostgreSQL schema holding the tables."""
        s = sql.Identifier(schema)
        self.sql = {name: sql.SQL(text).format(s=s).as_bytes() for name, text in queries.items()}
        """Each statement of ``queries``, by name, rendered for the schema."""

    def run(
        self,
        call: Callable[[Connection], T],
        landed: Callable[[Connection], T | None] | None = None,
    ) -> T:
        """Make ``call`` on the connection, again after a reconnection if it was lost (see
        ``Link.run``); a refused statement is a ``StoreError`` naming the schema."""
        if self.link.closed:
            raise StoreError(f"{self.url}: the store is closed")
        return self.link.run(call, self.refused, landed=landed)

    def query(
        self, name: str, params: tuple[object, ...] | Mapping[str, object] = ()
    ) -> list[tuple[Any, ...]]:
        """The rows statement ``name`` answers with ``params`` (binary)."""
        return self.run(lambda conn: conn.execute(self.sql[name], params, binary=True).fetchall())

    def refused(self, exc: psycopg.Error) -> StoreError:
        """The store's error for a statement the server refused."""
        return StoreError(f"{self.url} (schema {self.schema}): {text_of(exc)}")
