"""What only the PostgreSQL store must show: URL options and schema versions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from support import POSTGRES_URL

from plait.errors import StoreUnavailableError
from plait.events import TurnStarted
from plait.events.stores import open_store
from plait.events.stores.postgres import PostgresStore


@pytest.fixture
def schema() -> Iterator[str]:
    name = f"plait_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_open_store_takes_the_schema_from_the_url(schema: str) -> None:
    with open_store(f"{POSTGRES_URL}?schema={schema}") as store:
        assert isinstance(store, PostgresStore) and store.schema == schema
        store.append("s", [TurnStarted(turn=1)], 0)
    with psycopg.connect(POSTGRES_URL) as conn:
        (count,) = conn.execute(f'SELECT count(*) FROM "{schema}".events').fetchone() or (0,)
    assert count == 1


def test_a_newer_store_schema_is_refused(schema: str) -> None:
    PostgresStore(POSTGRES_URL, schema=schema).close()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{schema}\".meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreUnavailableError, match="schema version 99 is newer"):
        PostgresStore(POSTGRES_URL, schema=schema)


def test_a_bad_schema_name_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailableError, match="schema"):
        PostgresStore(POSTGRES_URL, schema="no; drop table")


def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreUnavailableError) as info:
        PostgresStore("postgresql://plait:s3cret@127.0.0.1:1/test?connect_timeout=2")
    assert "s3cret" not in str(info.value) and "127.0.0.1:1" in str(info.value)
