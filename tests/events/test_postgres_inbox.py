"""How a retry of ``PostgresStore.put_command`` tells whether its first try committed
(docs/processes.md#each-command-takes-effect-once): by the transaction's status, ending the
server process of a cut connection that still runs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from support import POSTGRES_URL, StoreFactory

from plait.events.stores import PostgresStore
from plait.events.stores._postgres_inbox import committed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PostgresStore]:
    factory = StoreFactory("postgres", tmp_path)
    opened = factory.open()
    assert isinstance(opened, PostgresStore)
    yield opened
    factory.close()


def insert(conn: psycopg.Connection[tuple[object, ...]], store: PostgresStore) -> tuple[int, int]:
    """Insert a command as ``put_command`` does, in the connection's open transaction; return
    its transaction and server process."""
    found = conn.execute(store._calls.sql["put_command"], ("s", b"{}")).fetchone()
    assert found is not None
    return int(found[1]), int(found[2])


def test_a_committed_transaction_is_said_committed(store: PostgresStore) -> None:
    with psycopg.connect(POSTGRES_URL) as first, psycopg.connect(POSTGRES_URL) as retry:
        xact, pid = insert(first, store)
        first.commit()
        assert committed(retry, store._calls.sql, xact, pid) is True


def test_a_rolled_back_transaction_is_said_not_committed(store: PostgresStore) -> None:
    with psycopg.connect(POSTGRES_URL) as first, psycopg.connect(POSTGRES_URL) as retry:
        xact, pid = insert(first, store)
        first.rollback()
        assert committed(retry, store._calls.sql, xact, pid) is False
    assert store.inbox.commands("s") == []


def test_a_transaction_still_running_is_ended_and_said_not_committed(
    store: PostgresStore,
) -> None:
    # The server has not seen the first connection go: its transaction is still open.
    first = psycopg.connect(POSTGRES_URL)
    try:
        xact, pid = insert(first, store)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as retry:
            assert committed(retry, store._calls.sql, xact, pid) is False
            alive = retry.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            assert alive.fetchone() == (0,)  # its server process was ended
        with pytest.raises(psycopg.OperationalError):
            first.commit()
    finally:
        first.close()
    assert store.inbox.commands("s") == []
