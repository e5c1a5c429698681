"""The store contract: every backend (memory, SQLite, PostgreSQL) passes the same tests."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
import pytest
from support import StoreFactory

from plait._errors import (
    BlobMissingError,
    ConcurrencyError,
    CorruptEventError,
    StoreError,
    TamperedError,
    TransientEventError,
    UnknownEventTypeError,
)
from plait.events import (
    GENESIS_HASH,
    AgentMessageDelta,
    BlobRef,
    Body,
    ConversationOpened,
    EventStore,
    NewEvent,
    SessionStarted,
    TaskCompleted,
    TaskStarted,
    ToolCallCompleted,
    TurnStarted,
    encode_event,
)
from plait.events._codec import event_hash
from plait.events._packing import is_packed

BIG = "x" * 20_000


def _one_by_one(store: EventStore, stream: str, bodies: list[Body]) -> None:
    """Append ``bodies`` an append each: where a store keeps an append in one row (SQLite's
    layout 4, PostgreSQL's), an edit is found at the row, so each event is a row of its own
    here."""
    for seq, body in enumerate(bodies):
        store.append(stream, [body], seq)


_ROW_EDITED = (
    "stored bytes do not match the row's hash (edited: the bytes, or the row's stream or "
    "previous hash, which the hash binds)"
)
"""What a read says of a row of encoding 3 (SQLite's and PostgreSQL's) whose bytes, stream,
prev_hash or hash were edited: its hash binds them all."""


def _chain_broken(stores: StoreFactory) -> str:
    """What a read says of the event after one edited with a hash to match: a broken link,
    or, where a row does not keep the hash its first event follows (SQLite's: it is the hash
    the row before keeps), that its events do not chain to its hash."""
    if stores.backend == "sqlite":
        return re.escape(_ROW_EDITED)
    return "prev_hash does not match the event before it"


def started(n: int = 3) -> list[NewEvent]:
    """A session start, a root conversation, then turns."""
    events = [
        NewEvent(SessionStarted(root_conversation_id="root")),
        NewEvent(ConversationOpened(), conversation_id="root"),
    ]
    events += [NewEvent(TurnStarted(turn=i), "root", "t1") for i in range(1, n - 1)]
    return events[:n]


def test_append_numbers_and_chains_events(store: EventStore) -> None:
    written = store.append("s1", started(3), expected_seq=0)
    assert [e.seq for e in written] == [1, 2, 3]
    assert written[0].prev_hash == GENESIS_HASH
    assert [e.prev_hash for e in written[1:]] == [e.hash for e in written[:-1]]
    positions = [e.position for e in written]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert store.read("s1") == written
    assert store.last_seq("s1") == 3


def test_a_read_while_the_stream_grows_is_not_taken_for_a_lost_tail(store: EventStore) -> None:
    store.append("s1", started(3), expected_seq=0)
    rows = store._rows  # type: ignore[attr-defined]

    def rows_then_grow(*args: object) -> object:  # an append lands just after the read
        read = rows(*args)
        store.append("s1", [NewEvent(TurnStarted(turn=9), "root", "t1")], store.last_seq("s1"))
        return read

    store._rows = rows_then_grow  # type: ignore[method-assign]
    assert [e.seq for e in store.read("s1")] == [1, 2, 3]
    del store._rows
    assert [e.seq for e in store.read("s1")] == [1, 2, 3, 4]


def test_append_records_given_time_and_stamps_missing_time(stores: StoreFactory) -> None:
    store = stores.open()
    at = datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    written = store.append("s1", [NewEvent(TaskStarted(), at=at), TaskStarted()], 0)
    read = store.read("s1")
    assert read[0].at == at
    assert read[1].at == stores.clock.now
    assert written == read


def test_read_window(store: EventStore) -> None:
    store.append("s1", [TurnStarted(turn=i) for i in range(1, 11)], 0)
    assert [e.seq for e in store.read("s1", after=3, upto=6)] == [4, 5, 6]
    assert [e.seq for e in store.read("s1", after=8)] == [9, 10]
    assert [e.seq for e in store.read("s1", limit=2)] == [1, 2]
    assert store.read("s1", after=10) == []
    assert store.read("unknown") == []
    assert store.last_seq("unknown") == 0


def test_stale_expected_seq_raises_and_writes_nothing(store: EventStore) -> None:
    store.append("s1", started(2), 0)
    with pytest.raises(ConcurrencyError) as info:
        store.append("s1", [TaskStarted(), TaskStarted()], expected_seq=1)
    assert (info.value.stream, info.value.expected_seq, info.value.actual_seq) == ("s1", 1, 2)
    assert "s1" in str(info.value) and "seq 2" in str(info.value)
    assert store.last_seq("s1") == 2
    with pytest.raises(ConcurrencyError):
        store.append("s2", [TaskStarted()], expected_seq=5)
    assert store.read("s2") == []


def test_append_is_all_or_nothing(store: EventStore) -> None:
    store.append("s1", started(2), 0)
    naive = datetime(2025, 1, 1)  # no timezone: refused while preparing the third event
    bad = [TaskStarted(), TaskStarted(), NewEvent(TaskStarted(), at=naive)]
    with pytest.raises(CorruptEventError, match="seq 5"):
        store.append("s1", bad, 2)
    assert store.last_seq("s1") == 2
    assert len(store.read_all()) == 2
    assert store.append("s1", [TaskStarted()], 2)[0].seq == 3


def test_transient_notifications_are_refused(store: EventStore) -> None:
    delta = AgentMessageDelta(conversation_id="root", task_id="t", text="hi")
    with pytest.raises(TransientEventError, match="AgentMessageDelta"):
        store.append("s1", [TaskStarted(), delta], 0)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        store.append("s1", [NewEvent(delta)], 0)  # type: ignore[arg-type]
    assert store.read("s1") == []


def test_read_all_orders_streams_globally(store: EventStore) -> None:
    store.append("a", [TurnStarted(turn=1)], 0)
    store.append("b", [TurnStarted(turn=1), TurnStarted(turn=2)], 0)
    store.append("a", [TurnStarted(turn=2)], 1)
    everything = store.read_all()
    assert [(e.stream, e.seq) for e in everything] == [("a", 1), ("b", 1), ("b", 2), ("a", 2)]
    after = store.read_all(everything[1].position)
    assert [(e.stream, e.seq) for e in after] == [("b", 2), ("a", 2)]
    assert len(store.read_all(limit=1)) == 1
    assert list(store.iter_all(batch=1)) == everything
    assert [(s.stream, s.last_seq) for s in store.streams()] == [("a", 2), ("b", 2)]


def test_subscription_delivers_past_then_live_events_once_in_order(store: EventStore) -> None:
    store.append("a", [TurnStarted(turn=1), TurnStarted(turn=2)], 0)
    got: list[tuple[str, int]] = []
    done = threading.Event()

    with store.subscribe() as sub:

        def consume() -> None:
            for event in sub:
                got.append((event.stream, event.seq))
                if len(got) == 6:
                    done.set()
                    return

        reader = threading.Thread(target=consume)
        reader.start()
        store.append("b", [TurnStarted(turn=1)], 0)
        store.append("a", [TurnStarted(turn=3), TurnStarted(turn=4)], 2)
        store.append("b", [TurnStarted(turn=2)], 1)
        assert done.wait(10), f"subscriber saw only {got}"
        reader.join(10)
    assert got == [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 4), ("b", 2)]


def test_subscription_from_a_position_and_timeout(store: EventStore) -> None:
    written = store.append("a", [TurnStarted(turn=1), TurnStarted(turn=2)], 0)
    with store.subscribe(written[0].position) as sub:
        first = sub.get(timeout=5)
        assert first is not None and first.seq == 2
        assert sub.position == first.position
        assert sub.get(timeout=0.05) is None


def test_closing_a_subscription_wakes_a_blocked_reader(store: EventStore) -> None:
    sub = store.subscribe()
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(sub.get()))
    reader.start()
    sub.close()
    reader.join(10)
    assert not reader.is_alive() and result == [None]


def test_concurrent_writers_lose_races_cleanly(stores: StoreFactory) -> None:
    """Writers on separate store objects race on one stream; retries keep the chain whole."""
    writers, each = 4, 15
    barrier = threading.Barrier(writers)
    conflicts = [0]

    def write(store: EventStore, who: int) -> None:
        barrier.wait(10)
        for turn in range(each):
            while True:
                seq = store.last_seq("s")
                try:
                    store.append("s", [NewEvent(TurnStarted(turn=turn), task_id=str(who))], seq)
                    break
                except ConcurrencyError:
                    conflicts[0] += 1

    opened = [stores.open() for _ in range(writers)]
    threads = [threading.Thread(target=write, args=(s, i)) for i, s in enumerate(opened)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    events = opened[0].read("s")
    assert [e.seq for e in events] == list(range(1, writers * each + 1))
    assert sorted(e.task_id or "" for e in events) == sorted(
        str(w) for w in range(writers) for _ in range(each)
    )
    assert opened[0].verify("s").ok


def test_verify_names_the_first_edited_event(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=i) for i in range(1, 6)])
    assert store.verify("s1").ok
    original = store.read("s1")[2]
    data = stores.tamper.encode(msgspec.structs.replace(original, body=TurnStarted(turn=99)))
    stores.tamper.set_data("s1", 3, data)
    report = store.verify("s1")
    assert (report.ok, report.first_bad_seq) == (False, 3)
    assert "hash" in report.reason


def test_verify_catches_an_edit_with_a_recomputed_hash(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=i) for i in range(1, 6)])
    original = store.read("s1")[1]
    data = stores.tamper.encode(msgspec.structs.replace(original, body=TurnStarted(turn=99)))
    stores.tamper.set_data("s1", 2, data, stores.tamper.hash("s1", original.prev_hash, data))
    report = store.verify("s1")
    assert (report.ok, report.first_bad_seq) == (False, 3)
    assert ("row's hash" if stores.backend == "sqlite" else "chain") in report.reason


def test_every_read_refuses_an_edited_event(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=i) for i in range(1, 6)])
    store.append("s2", [TurnStarted(turn=1)], 0)
    original = store.read("s1")[2]
    data = stores.tamper.encode(msgspec.structs.replace(original, body=TurnStarted(turn=99)))
    stores.tamper.set_data("s1", 3, data)  # the hash column left as it was
    edited = f"stream s1 seq 3: {re.escape(_ROW_EDITED)}"
    for read in (
        lambda: store.read("s1"),
        lambda: store.read("s1", after=2),
        lambda: store.read_all(),
        lambda: list(store.batches(batch=2)),
        lambda: list(store.iter_all()),
    ):
        with pytest.raises(TamperedError, match=edited):
            read()
    assert store.read("s2")[0].body == TurnStarted(turn=1)  # other streams read as ever
    assert store.read("s1", check=False)[2].body == TurnStarted(turn=99)  # shown unvouched
    digest = stores.tamper.hash("s1", original.prev_hash, data)
    stores.tamper.set_data("s1", 3, data, digest)  # and a hash to match
    broken = f"stream s1 seq 4: {_chain_broken(stores)}"
    for read in (
        lambda: store.read("s1"),
        lambda: store.read("s1", after=3),
        lambda: store.read_all(),
        lambda: list(store.batches(batch=2)),
    ):
        with pytest.raises(TamperedError, match=broken):
            read()


def _column_edit(backend: str, column: str, value: object, said: str) -> object:
    return pytest.param(backend, column, value, said, id=f"{backend}-{column}")


SEQ_EDITED = {
    "memory": "s1 seq 9: its row places it at seq 9, its bytes at 2",
    "sqlite": f"s1 seq 9: {_ROW_EDITED}",  # it follows the row before seq 9 now: seq 3's
    "postgres": "s1 seq 9: its row places it at seq 9, its bytes at 2",
}

_COLUMN_EDITS = [
    # A row of encoding 3 holds an append: no column says an event's type or version, its
    # seq and count place its events, its prev_hash and hash are its chain's, and the hash
    # binds the stream: the row is not where it was put. (A count too large is named at the
    # seq the row says it starts at.)
    *(
        edit
        for backend in ("memory", "sqlite", "postgres")
        for edit in (
            _column_edit(backend, "stream", "s9", f"s9 seq 2: {_ROW_EDITED}"),
            _column_edit(backend, "seq", 9, SEQ_EDITED[backend]),
            _column_edit(backend, "count", 2, "s1 seq 1: the row's data is not the 2 events its"),
            _column_edit(backend, "prev_hash", bytes(32), f"s1 seq 2: {_ROW_EDITED}"),
            _column_edit(backend, "hash", bytes(32), f"s1 seq 2: {_ROW_EDITED}"),
        )
    ),
]


@pytest.mark.parametrize(("stores", "column", "value", "said"), _COLUMN_EDITS, indirect=["stores"])
def test_every_read_checks_the_columns_against_the_bytes(
    stores: StoreFactory, column: str, value: object, said: str
) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=1), TaskStarted(), TaskStarted()])
    store.append("s2", [TurnStarted(turn=1)], 0)
    stores.tamper.set_column("s1", 2, column, value)
    reads: list[Callable[[], object]] = [
        store.read_all,
        lambda: list(store.batches(batch=2)),
        lambda: list(store.iter_all()),
    ]
    if column not in ("stream", "seq"):  # those columns are where ``read`` finds the row
        reads.append(lambda: store.read("s1"))
    for read in reads:
        with pytest.raises(TamperedError, match=re.escape(f"stream {said}")):
            read()
    assert store.read("s2")[0].body == TurnStarted(turn=1)  # other streams read as ever


@pytest.mark.parametrize(
    ("column", "value", "first_bad_seq", "reason"),
    [
        ("count", 2, 2, "the row's data is not the 2 events its count says"),
        ("prev_hash", bytes(32), 2, _ROW_EDITED),
        ("hash", bytes(32), 2, _ROW_EDITED),
    ],
)
def test_verify_checks_a_rows_columns_against_its_bytes(
    stores: StoreFactory, column: str, value: object, first_bad_seq: int, reason: str
) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=1), TaskStarted(), TaskStarted()])
    stores.tamper.set_column("s1", 2, column, value)
    report = store.verify("s1")
    assert (report.ok, report.first_bad_seq) == (False, first_bad_seq)
    assert report.reason.startswith(reason), report.reason


def test_a_read_across_streams_finds_a_moved_position(dense_stores: StoreFactory) -> None:
    store = dense_stores.open()
    store.append("s1", [TurnStarted(turn=1), TaskStarted()], 0)
    store.append("s2", [TurnStarted(turn=1)], 0)
    dense_stores.tamper.set_column("s2", 1, "position", 9)  # the last row: the order is kept
    moved = r"stream s2 seq 1: at position 9, where 3 was next"
    for read in (store.read_all, lambda: list(store.batches(batch=2))):
        with pytest.raises(TamperedError, match=moved):
            read()


def test_verify_finds_a_moved_position(dense_stores: StoreFactory) -> None:
    store = dense_stores.open()
    store.append("s1", [TurnStarted(turn=1), TaskStarted()], 0)
    store.append("s2", [TurnStarted(turn=1)], 0)
    dense_stores.tamper.set_column("s2", 1, "position", 9)  # its order, chain and head are kept
    gap = "positions jump from 2 to 9 (stream s2 seq 1): 3 to 8 missing; positions are dense"
    for stream, at in (("s2", 1), ("s1", None)):  # every stream's reads across streams stop
        report = store.verify(stream)
        assert (report.ok, report.first_bad_seq) == (False, at)
        assert report.reason.startswith(gap), report.reason


def test_verify_finds_a_stream_lost_whole(dense_stores: StoreFactory) -> None:
    # Its rows and its head gone: nothing of the stream is left to miss, but its positions
    # (where they are not dense, only a witness of signed heads can say: test_witness).
    store = dense_stores.open()
    store.append("s1", [TurnStarted(turn=1)], 0)
    store.append("s2", [TurnStarted(turn=1), TaskStarted()], 0)
    store.append("s3", [TurnStarted(turn=1)], 0)
    dense_stores.tamper.delete("s2", 1)
    dense_stores.tamper.delete("s2", 2)
    dense_stores.tamper.delete_head("s2")
    assert [info.stream for info in store.streams()] == ["s1", "s3"]
    report = store.verify("s3")
    assert (report.ok, report.first_bad_seq) == (False, 1)
    assert report.reason.startswith("positions jump from 1 to 4 (stream s3 seq 1): 2 to 3 missing")
    dense_stores.tamper.delete("s1", 1)
    dense_stores.tamper.delete_head("s1")
    assert store.verify("s3").reason.startswith("positions start at 4 (stream s3 seq 1): 1 to 3")


def test_verify_finds_a_position_out_of_its_streams_order(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=1), TaskStarted()])
    store.append("s2", [TurnStarted(turn=1)], 0)
    first = store.read("s1")[0].position
    stores.tamper.set_column("s1", 2, "position", 0)  # dense no more, and before seq 1
    report = store.verify("s1")
    assert (report.ok, report.first_bad_seq) == (False, 2)
    assert report.reason == f"at position 0, not after seq 1's ({first}): a row moved"


def test_a_read_to_the_head_checks_the_heads_hash(stores: StoreFactory) -> None:
    store = stores.open()
    store.append("s1", [TurnStarted(turn=i) for i in range(1, 4)], 0)
    stores.tamper.set_head_hash("s1", bytes(32))
    assert len(store.read("s1", upto=2)) == 2  # a window short of the head
    for read in (lambda: store.read("s1"), lambda: store.read("s1", after=2)):
        with pytest.raises(TamperedError, match="stream s1 seq 3: the stream head's hash"):
            read()
    assert "the stream head's hash does not match" in store.verify("s1").reason


def test_verify_and_read_catch_a_deleted_event(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=i) for i in range(1, 6)])
    stores.tamper.delete("s1", 4)
    assert store.verify("s1").first_bad_seq == 4
    if stores.backend == "sqlite":  # the row after it does not follow the one before it
        with pytest.raises(TamperedError, match=f"stream s1 seq 5: {_chain_broken(stores)}"):
            store.read("s1")
    else:
        with pytest.raises(CorruptEventError, match=r"stream s1 seq 4: event missing"):
            store.read("s1")
    stores.tamper.delete("s1", 5)
    with pytest.raises(CorruptEventError, match="seq 4"):
        store.read("s1")  # a truncated tail is caught by the stream head
    assert not store.verify("s1").ok


def test_verify_catches_edited_and_missing_blobs(stores: StoreFactory) -> None:
    store = stores.open()
    store.append("s1", [TaskStarted(), ToolCallCompleted(call_id="c", output=BIG)], 0)
    body = store.read("s1", resolve_blobs=False)[1].body
    assert isinstance(body, ToolCallCompleted) and isinstance(body.output, BlobRef)
    stores.tamper.set_blob(body.output.sha256, b"y" * len(BIG))
    report = store.verify("s1")
    assert (report.ok, report.first_bad_seq) == (False, 2) and "edited" in report.reason
    stores.tamper.delete_blob(body.output.sha256)
    assert "missing" in store.verify("s1").reason
    with pytest.raises(
        BlobMissingError, match=f"stream s1 seq 2: blob sha256:{body.output.sha256}"
    ):
        store.read("s1")


def test_corrupt_bytes_name_stream_and_seq(stores: StoreFactory) -> None:
    store = stores.open()
    _one_by_one(store, "s1", [TurnStarted(turn=i) for i in range(1, 4)])
    prev = store.read("s1")[1].prev_hash
    # Bytes that are no event: a row holds its events' entries end to end (encoding 3), so a
    # msgpack value that is not an entry (bytes that are not msgpack do not say where an
    # entry ends: they cannot be hashed).
    garbage, wrong = msgspec.msgpack.encode("garbage"), "stored event is not an entry"
    stores.tamper.set_data("s1", 2, garbage)  # its hash no longer matches
    with pytest.raises(TamperedError, match=r"stream s1 seq 2: stored bytes do not match"):
        store.read("s1")
    with pytest.raises(TamperedError, match=r"stream s1 seq 2"):
        store.read_all()
    # written so, its hash with it: a bug, not an edit
    stores.tamper.set_data("s1", 2, garbage, stores.tamper.hash("s1", prev, garbage))
    with pytest.raises(CorruptEventError, match=f"stream s1 seq 2: {wrong}") as caught:
        store.read("s1")
    assert not isinstance(caught.value, TamperedError)
    with pytest.raises(StoreError):
        store.read_all()


def test_unknown_event_type_names_stream_and_seq(stores: StoreFactory) -> None:
    store = stores.open()
    store.append("s1", [TurnStarted(turn=1), TaskStarted()], 0)
    event, tamper = store.read("s1")[1], stores.tamper
    raw = msgspec.msgpack.decode(tamper.encode(event))  # its fields: [..., v, body, ...]
    body = next(i for i, field in enumerate(raw) if isinstance(field, dict))
    raw[body] = {"type": "FromTheFuture", "gadget": 1}
    future = msgspec.msgpack.encode(raw)  # as a newer plait would write it, hash and all
    tamper.set_data("s1", 2, future, tamper.hash("s1", event.prev_hash, future))
    with pytest.raises(UnknownEventTypeError, match=r"stream s1 seq 2: unknown event type"):
        store.read("s1")
    raw[body], raw[body - 1] = {"type": "TaskStarted"}, 7
    future = msgspec.msgpack.encode(raw)
    tamper.set_data("s1", 2, future, tamper.hash("s1", event.prev_hash, future))
    with pytest.raises(UnknownEventTypeError, match="'TaskStarted' version 7"):
        store.read("s1")


def test_events_survive_reopening(durable_stores: StoreFactory) -> None:
    stores = durable_stores
    first = stores.open()
    written = first.append("s1", [TaskStarted(), TaskCompleted(last_assistant_message=BIG)], 0)
    first.close()
    again = stores.open()
    assert again.read("s1") == written
    assert again.verify("s1").ok


def test_a_log_of_the_first_encoding_goes_on_in_the_third(stores: StoreFactory) -> None:
    """A stream an earlier plait wrote (encoding 1, its chain and head as it left them, each
    event moved to a row of its own as a store of an earlier layout's are) takes new events in
    encoding 3, and every read and ``verify`` cover both (docs/event-log.md#stores)."""
    store = stores.open()
    store.append("s1", [TurnStarted(turn=i) for i in range(1, 4)], 0)
    store.append("s2", [TurnStarted(turn=1)], 0)
    previous = GENESIS_HASH
    for event in store.read("s1"):  # written again as that plait wrote them
        old = msgspec.structs.replace(event, prev_hash=previous)
        data = encode_event(old, encoding=1)
        previous = event_hash("s1", data)
        stores.tamper.move_out("s1", event.seq, data, previous)
    stores.tamper.set_head_hash("s1", previous)
    store.append("s1", [TaskStarted(), TurnStarted(turn=4)], 3)
    rows = store.as_stored("s1").rows
    assert [(is_packed(row[6]), row[3], bytes(row[4])) for row in rows] == [
        *[(False, 1, b"")] * 3,  # moved: their bytes hold the hash before
        (True, 2, previous),
    ]
    assert store.verify("s1").ok
    events = store.read("s1")
    assert events[3].prev_hash == events[2].hash == previous
    assert [e.body for e in events] == [
        *(TurnStarted(turn=i) for i in range(1, 4)),
        TaskStarted(),
        TurnStarted(turn=4),
    ]
    assert store.read("s1", after=2) == events[2:]
    everything = store.read_all()
    assert [e for e in everything if e.stream == "s1"] == events
    assert [e for batch in store.batches(batch=2) for e in batch] == everything
    assert list(store.iter_all(batch=2)) == everything
