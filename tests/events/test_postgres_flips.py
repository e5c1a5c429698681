"""Single bytes flipped in PostgreSQL's rows of appends: every read refuses the row, or reads
what was written (docs/event-log.md#encoding-3).

Each byte of one row's ``data`` (a zstd frame), ``prev_hash`` and ``hash`` is flipped in turn,
with the SQL an insider or a disk fault would use, and the stream read back by ``read``,
``read_all`` and ``verify``. A flip may change nothing zstd reads (a bit it ignores): then the
events must be the very ones written. Anything else must be refused, naming the row's stream.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from support import POSTGRES_URL

from plait import CorruptEventError
from plait.events import (
    ConversationOpened,
    Event,
    NewEvent,
    SessionStarted,
    ToolCallCompleted,
    TurnStarted,
)
from plait.events.stores import PostgresStore


@pytest.fixture
def store() -> Iterator[PostgresStore]:
    schema = f"plait_test_{uuid.uuid4().hex[:12]}"
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        yield store
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def outcome(store: PostgresStore, written: list[Event]) -> str:
    """What the reads of ``s`` make of the store as it is now: ``refused`` (every read, with
    an error naming the stream), ``as written``, or what went wrong."""
    said: list[str] = []
    for read in (lambda: store.read("s"), lambda: store.read_all(limit=None)):
        try:
            events = read()
        except CorruptEventError as exc:
            said.append("refused" if exc.stream == "s" else f"refused, naming {exc.stream}")
        else:
            said.append("as written" if events == written else "read other events")
    report = store.verify("s")
    said.append("as written" if report.ok else "refused")
    return said[0] if len(set(said)) == 1 else f"reads disagree: {said}"


def test_every_flipped_byte_of_a_row_is_refused_or_changes_nothing(store: PostgresStore) -> None:
    store.append("s", [SessionStarted(root_conversation_id="root")], 0)
    middle = [
        NewEvent(ConversationOpened(), "root"),
        NewEvent(TurnStarted(turn=1), "root", "t1"),
        NewEvent(ToolCallCompleted("c1", "a short output"), "root", "t1"),
    ]
    store.append("s", middle, 1)
    store.append("s", [NewEvent(TurnStarted(turn=2), "root", "t1")], 4)
    written = store.read("s")
    table = f'"{store.schema}".appends'
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        found = conn.execute(f"SELECT data, prev_hash, hash FROM {table} WHERE seq = 4")
        original = found.fetchone()
        assert original is not None
        seen: dict[str, int] = {}
        for column, value in zip(("data", "prev_hash", "hash"), original, strict=True):
            for at in range(len(value)):
                flipped = bytearray(value)
                flipped[at] ^= 0x5A
                update = f"UPDATE {table} SET {column} = %s WHERE seq = 4"
                conn.execute(update, (bytes(flipped),))
                got = outcome(store, written)
                seen[got] = seen.get(got, 0) + 1
                assert got in ("refused", "as written"), f"{column} byte {at}: {got}"
            conn.execute(update, (value,))
    assert outcome(store, written) == "as written"
    assert seen["refused"] >= len(original[1]) + len(original[2])  # every hash byte, at least
