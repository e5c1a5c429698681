"""What only the PostgreSQL store must show: URL options, schema versions, the append function."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from support import POSTGRES_URL

from plait._errors import (
    ConcurrencyError,
    LeaseLostError,
    StoreUnavailableError,
    TamperedError,
)
from plait.events import Body, Event, TaskStarted, TurnStarted
from plait.events._codec import BODY_TAGS, GENESIS_HASH, encode_event, hasher
from plait.events._packing import pack
from plait.events.stores import PostgresStore, open_store
from plait.events.stores import _postgres_announce as postgres_announce
from plait.events.stores._postgres_announce import LISTENING_SQL, Announcer, listening
from plait.events.stores._postgres_settled import Settled
from plait.events.stores._postgres_sql import APPEND_SIGNATURE, POSITION_BITS


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
        (count,) = conn.execute(f'SELECT count(*) FROM "{schema}".appends').fetchone() or (0,)
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


def drop_append_function(schema: str) -> None:
    """Make ``schema`` look as a layout-2 store written before appends were one call."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP FUNCTION "{schema}".{APPEND_SIGNATURE}')


def test_an_older_store_gets_the_append_function_when_opened(schema: str) -> None:
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        store.append("s", [TurnStarted(turn=1)], 0)
    drop_append_function(schema)
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        store.append("s", [TurnStarted(turn=2)], 1)
        assert [e.body for e in store.read("s")] == [TurnStarted(turn=1), TurnStarted(turn=2)]
        assert store.verify("s").ok


def as_layout_4(schema: str, streams: dict[str, list[Body]], dense: bool = False) -> None:
    """Make ``schema`` a store as layouts 1 to 4 left it: a row per event in ``events``,
    each of encoding 2 (``dense``: positions from 1, as layout 3 numbered them), its appends
    gone with their table and function."""
    PostgresStore(POSTGRES_URL, schema=schema).close()
    prepared = {s: rows_of_encoding_2(s, bodies) for s, bodies in streams.items()}
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(
            "CREATE TABLE events (position BIGINT PRIMARY KEY, stream TEXT NOT NULL, "
            "seq BIGINT NOT NULL, type TEXT NOT NULL, v INT NOT NULL, data BYTEA NOT NULL, "
            "hash BYTEA NOT NULL, UNIQUE (stream, seq))"
        )
        position = 0
        for stream, rows in prepared.items():
            for seq, kind, v, data, digest in rows:
                position += 1
                xid = conn.execute("SELECT pg_current_xact_id()::text::int8").fetchone()
                assert xid is not None
                at = position if dense else (xid[0] << POSITION_BITS) + seq
                conn.execute(
                    "INSERT INTO events VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (at, stream, seq, kind, v, data, digest),
                )
            conn.execute(
                "INSERT INTO streams VALUES (%s, %s, %s, %s)",
                (stream, len(rows), rows[-1][4], position),
            )
        conn.execute("DROP TABLE appends")
        conn.execute(f"DROP FUNCTION {APPEND_SIGNATURE}")
        if dense:
            conn.execute("DELETE FROM meta WHERE key = 'position_base'")
        version = "3" if dense else "4"
        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (version,))


def rows_of_encoding_2(stream: str, bodies: list[Body]) -> list[tuple[int, str, int, bytes, bytes]]:
    """The rows layouts 1 to 4 stored for ``bodies``, the first events of ``stream``: each
    one's seq, type, version, bytes (encoding 2: the hash before inside, the stream not) and
    hash."""
    digest, prev = hasher(stream), GENESIS_HASH
    rows = []
    for seq, body in enumerate(bodies, 1):
        version = type(body).VERSION
        event = Event("", seq, datetime(2026, 1, 1, tzinfo=UTC), version, body, prev)
        data = encode_event(event)
        prev = digest(data)
        rows.append((seq, BODY_TAGS[type(body)], version, data, prev))
    return rows


def test_a_store_of_an_earlier_layout_is_moved_once_and_verifies(schema: str) -> None:
    as_layout_4(schema, {"s": [TurnStarted(turn=1), TurnStarted(turn=2)], "t": [TaskStarted()]})
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        before = store.read_all()
        store.append("s", [TurnStarted(turn=3)], 2)
        assert [(e.stream, e.seq) for e in store.read_all()] == [
            *((e.stream, e.seq) for e in before),
            ("s", 3),
        ]
        assert [e.body for e in store.read("s")] == [TurnStarted(turn=i) for i in (1, 2, 3)]
        assert store.verify("s").ok and store.verify("t").ok
        stored = store.as_stored("s")
        assert [(row[2], row[3], bytes(row[4])) for row in stored.rows][:2] == [
            (1, 1, b""),
            (2, 1, b""),
        ]  # moved as they were: their bytes hold the hash before
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        gone = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".events',)).fetchone()
        assert gone == (None,)


def test_an_edited_event_moved_from_an_earlier_layout_is_found(schema: str) -> None:
    as_layout_4(schema, {"s": [TurnStarted(turn=1), TurnStarted(turn=2)]})
    PostgresStore(POSTGRES_URL, schema=schema).close()  # moved now
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            # encoding 2: an array, its stream "", then its seq: made 7
            f'UPDATE "{schema}".appends SET data = overlay(data placing %s from 3) '
            "WHERE stream = 's' AND seq = 2",
            (b"\x07",),
        )
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        with pytest.raises(TamperedError, match="s seq 2: stored bytes do not match their hash"):
            store.read("s")
        report = store.verify("s")
        assert (report.ok, report.first_bad_seq) == (False, 2)


def test_a_store_of_dense_positions_takes_new_events_after_them(schema: str) -> None:
    as_layout_4(schema, {"s": [TurnStarted(turn=1), TurnStarted(turn=2)]}, dense=True)
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        store.append("t", [TurnStarted(turn=3)], 0)
        store.append("s", [TurnStarted(turn=4)], 2)
        read = store.read_all()
        assert [(e.stream, e.seq) for e in read] == [("s", 1), ("s", 2), ("t", 1), ("s", 3)]
        assert [e.position for e in read][:2] == [1, 2]
        assert store.verify("s").ok and store.verify("t").ok


def test_a_store_restored_into_a_younger_server_goes_on_after_its_positions(
    schema: str,
) -> None:
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        (first,) = store.append("s", [TurnStarted(turn=1)], 0)
    ahead = first.position + (10**9 << POSITION_BITS)  # written by a server 10**9 xids older
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".appends SET position = %s', (ahead,))
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        (second,) = store.append("s", [TurnStarted(turn=2)], 1)
        assert second.position > ahead
        assert [e.seq for e in store.read_all()] == [1, 2]
        assert store.verify("s").ok


def test_processes_opening_an_older_store_at_once_all_open_it(schema: str) -> None:
    PostgresStore(POSTGRES_URL, schema=schema).close()
    drop_append_function(schema)
    barrier = threading.Barrier(4)
    failed: list[BaseException] = []

    def open_and_append(who: int) -> None:
        barrier.wait(10)
        try:
            with PostgresStore(POSTGRES_URL, schema=schema) as store:
                store.append(f"s{who}", [TurnStarted(turn=who)], 0)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=open_and_append, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert failed == []
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        assert sorted(info.stream for info in store.streams()) == ["s0", "s1", "s2", "s3"]


def append_args(store: PostgresStore, stream: str, epoch: int | None = None) -> tuple[Any, ...]:
    """The append function's arguments for one event, the first of a new ``stream``."""
    prepared = store.prepare(stream, [TurnStarted(turn=1)], 0, GENESIS_HASH)
    ((seq, _, _, data, digest),) = prepared.rows
    row = pack(seq, GENESIS_HASH, [data], digest)
    return (stream, 0, GENESIS_HASH, epoch, 1, row.hash, row.data, [], [], [])


def raw_append(conn: psycopg.Connection[Any], store: PostgresStore, stream: str) -> int:
    """Append one event to a new ``stream`` by a call of the append function on ``conn`` (no
    announcement: as a process killed right after its commit leaves it); return its position."""
    args = append_args(store, stream)
    found = conn.execute(store._calls.sql["append"], args).fetchone()
    assert found is not None
    return int(found[0])


def test_a_subscription_waits_for_an_append_begun_earlier_and_skips_nothing(schema: str) -> None:
    """Positions follow transaction ids, not commits (docs/event-log.md#streams-seq-and-position):
    an append begun first and committed last takes the lower position. A plain read sees what
    is committed; a subscription hands out nothing past it until it commits, then both, in
    order."""
    with (
        PostgresStore(POSTGRES_URL, schema=schema) as store,
        psycopg.connect(POSTGRES_URL) as held,  # not autocommit: its transaction stays open
    ):
        early = raw_append(held, store, "early")
        (late,) = store.append("late", [TurnStarted(turn=2)], 0)
        assert early < late.position
        assert [e.stream for e in store.read_all()] == ["late"]
        with store.subscribe() as tail:
            assert tail.get(timeout=0.5) is None  # "late" is held back while "early" runs
            held.commit()
            got = [tail.get(timeout=10), tail.get(timeout=10)]
        assert [(e.stream, e.position) for e in got if e is not None] == [
            ("early", early),
            ("late", late.position),
        ]


class WatchedStore(PostgresStore):
    """A store that says when a subscription has read (it then waits for what comes next)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read = threading.Event()

    def _settled_batch(self, after_position: int) -> list[Event]:
        events = super()._settled_batch(after_position)
        self.read.set()
        return events


def test_a_subscription_sees_an_append_no_one_announced(schema: str) -> None:
    with (
        WatchedStore(POSTGRES_URL, schema=schema) as store,
        psycopg.connect(POSTGRES_URL, autocommit=True) as other,
        store.subscribe() as tail,
    ):
        got: list[Event | None] = []
        # No timeout: a get that ends at its timeout reads once more, and would find it anyway.
        waiting = threading.Thread(target=lambda: got.append(tail.get()), daemon=True)
        waiting.start()
        assert store.read.wait(10)  # it read, found nothing, and waits
        position = raw_append(other, store, "s")
        waiting.join(15)
        # Found by its periodic look (POLL_SEC): nothing announced it.
        assert [(e.stream, e.position) for e in got if e is not None] == [("s", position)]


def test_appends_are_announced_only_while_someone_listens(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_announce, "LOOK_SEC", 0.0)  # look before each announcement
    heard: list[bool] = []
    looked = threading.Event()
    look = Announcer._heard

    def watched(announcer: Announcer, conn: Any) -> bool:
        heard.append(look(announcer, conn))
        looked.set()
        return heard[-1]

    monkeypatch.setattr(Announcer, "_heard", watched)
    with (
        PostgresStore(POSTGRES_URL, schema=schema) as store,
        psycopg.connect(POSTGRES_URL, autocommit=True) as other,
    ):
        other.execute(f'LISTEN "{store.channel}"')  # without the lock: not counted
        store.append("s", [TurnStarted(turn=1)], 0)
        assert looked.wait(10)
        looked.clear()
        other.execute(LISTENING_SQL, listening(store.channel))  # as a NotifyWaiter does
        store.append("s", [TurnStarted(turn=2)], 1)
        assert looked.wait(10)
        assert heard == [False, True]
        (notified,) = other.notifies(timeout=10, stop_after=1)
        assert notified.channel == store.channel
        assert not list(other.notifies(timeout=0))  # the first append was not announced


def test_subscriptions_held_back_long_say_by_which_transaction(
    schema: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Settled, "warn_sec", 0.1)  # 30 s, for a suite
    with (
        PostgresStore(POSTGRES_URL, schema=schema) as store,
        psycopg.connect(POSTGRES_URL) as held,
        caplog.at_level(logging.WARNING, logger="plait"),
    ):
        held.execute("SELECT pg_current_xact_id()")  # a transaction with an id, left open
        (event,) = store.append("s", [TurnStarted(turn=1)], 0)
        with store.subscribe() as tail:
            deadline = time.monotonic() + 10
            while not (said := [r.getMessage() for r in caplog.records if "wait:" in r.message]):
                assert tail.get(timeout=0.2) is None  # held back while the transaction runs
                assert time.monotonic() < deadline, "nothing said of what holds it back"
            held.commit()
            got = tail.get(timeout=10)
        assert got is not None and got.position == event.position
    (line,) = said  # once a spell
    assert line.startswith(f"{store.url} (schema {schema}): subscriptions wait: events ")
    assert "held back by the transaction of server process " in line
    assert line.endswith("they are handed out once it ends (docs/scale.md#one-server)")


def test_a_takeover_waits_for_an_append_in_flight(schema: str) -> None:
    with (
        PostgresStore(POSTGRES_URL, schema=schema) as store,
        PostgresStore(POSTGRES_URL, schema=schema) as other,
        psycopg.connect(POSTGRES_URL) as held,
    ):
        a = store.leases.acquire("s", "a", -1.0)  # lapsed at once: anyone may take it
        # a's append, its transaction kept open before the commit
        held.execute(store._calls.sql["append"], append_args(store, "s", a.epoch))
        taken: list[int] = []
        thread = threading.Thread(
            target=lambda: taken.append(other.leases.acquire("s", "b", 10).epoch)
        )
        thread.start()
        thread.join(0.3)
        assert thread.is_alive()  # b waits for a's append to commit
        held.commit()
        thread.join(10)
        assert taken == [a.epoch + 1]
        assert [e.body for e in store.read("s")] == [TurnStarted(turn=1)]
        late = store.prepare("s", [TurnStarted(turn=2)], 1, store.read("s")[-1].hash)
        with pytest.raises(LeaseLostError, match="now epoch 2, held by b"):
            store.append_prepared("s", late, epoch=a.epoch)


def waiting_on_a_lock(application: str, timeout: float = 10.0) -> None:
    """Return once a backend of ``application`` waits on a lock (else fail at ``timeout``)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        while time.monotonic() < deadline:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE application_name = %s AND wait_event_type = 'Lock'",
                (application,),
            ).fetchone()
            if found and found[0]:
                return
            conn.execute("SELECT pg_sleep(0.01)")  # the server's pause, between two looks
    raise AssertionError(f"no backend of {application} waited on a lock")


def test_with_connections_a_call_that_waits_holds_up_no_other(schema: str) -> None:
    app = f"plait-pool-{uuid.uuid4().hex[:6]}"
    url = f"{POSTGRES_URL}?application_name={app}&connections=2"
    with PostgresStore(url, schema=schema) as store, psycopg.connect(POSTGRES_URL) as held:
        store.leases.acquire("a", "other", 600)
        held.execute(f'SELECT * FROM "{schema}".leases WHERE stream = %s FOR UPDATE', ("a",))
        taken: list[str | None] = []
        thread = threading.Thread(
            target=lambda: taken.append(store.leases.acquire("a", "other", 600).owner)
        )
        thread.start()
        waiting_on_a_lock(app)  # one of its connections waits for the row
        store.append("b", [TurnStarted(turn=1)], 0)  # on the other: not held up
        assert [e.seq for e in store.read("b")] == [1] and thread.is_alive()
        held.commit()
        thread.join(10)
        assert taken == ["other"]


@pytest.mark.parametrize("given", ["0", "two"])
def test_connections_that_are_not_a_count_are_a_clear_error(schema: str, given: str) -> None:
    with pytest.raises(StoreUnavailableError, match=f"connections={given!r} is not a number"):
        PostgresStore(f"{POSTGRES_URL}?connections={given}", schema=schema)


def test_a_stream_moved_by_another_store_object_is_a_concurrency_error(schema: str) -> None:
    with (
        PostgresStore(POSTGRES_URL, schema=schema) as one,
        PostgresStore(POSTGRES_URL, schema=schema) as other,
    ):
        first = one.append("s", [TurnStarted(turn=1)], 0)
        other.append("s", [TurnStarted(turn=2)], 1)
        with pytest.raises(ConcurrencyError) as info:
            one.append("s", [TurnStarted(turn=3)], 1)  # the head one wrote is gone
        assert (info.value.expected_seq, info.value.actual_seq) == (1, 2)
        made = one.prepare("s", [TurnStarted(turn=3)], 1, first[-1].hash)
        with pytest.raises(ConcurrencyError) as info:
            one.append_prepared("s", made)
        assert (info.value.expected_seq, info.value.actual_seq) == (1, 2)
        one.append("s", [TurnStarted(turn=3)], 2)
        assert one.verify("s").ok


def test_append_reads_the_head_again_when_the_one_it_wrote_was_replaced(schema: str) -> None:
    with PostgresStore(POSTGRES_URL, schema=schema) as store:
        store.append("s", [TurnStarted(turn=1)], 0)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:  # as a restore would
            conn.execute(f'UPDATE "{schema}".streams SET last_hash = %s', (b"x" * 32,))
        (event,) = store.append("s", [TurnStarted(turn=2)], 1)
        assert (event.seq, event.prev_hash) == (2, b"x" * 32)
