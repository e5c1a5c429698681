"""Retention (docs/storage.md#retention): ``prune`` removes whole sessions closed or idle
before a date, records each, and the store still proves itself: every read accepts the gaps
the records cover and refuses any other, ``verify`` accounts for them, a witness's head of a
pruned session is checked against its record. On every backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from scripted import record_inventory
from support import StoreFactory

from plait import CorruptEventError, TamperedError
from plait.events import (
    ConversationContextChanged,
    ConversationOpened,
    EventStore,
    ForkOrigin,
    NewEvent,
    PublicKey,
    SessionClosed,
    SessionReopened,
    SessionStarted,
    Signer,
    Witness,
    prune,
)
from plait.events._blobs import DEFAULT_BLOB_THRESHOLD, blob_refs
from plait.events.stores import SqliteStore

DAY = datetime(2026, 1, 1, tzinfo=UTC)
"""The date the tests prune before."""
OLD = DAY - timedelta(days=30)
NEW = DAY + timedelta(days=30)


def write(
    store: EventStore,
    stream: str,
    at: datetime,
    *,
    closed: bool = True,
    reopened: bool = False,
    instructions: str | None = None,
    fork_of: str | None = None,
    padding: int = 0,
) -> str:
    """A session of a few events, all recorded at ``at``: started (a fork of ``fork_of``),
    its root opened with ``instructions``, changed ``padding`` times to big ones, closed
    (and reopened)."""
    origin = None if fork_of is None else ForkOrigin(fork_of, 1)
    body = [
        SessionStarted("root", forked_from=origin),
        ConversationOpened(base_instructions=instructions),
    ]
    big = "x" * (DEFAULT_BLOB_THRESHOLD * 4)
    body += [
        ConversationContextChanged(["user_instructions"], user_instructions=f"{stream} {i} {big}")
        for i in range(padding)
    ]
    if closed:
        body.append(SessionClosed())
    if closed and reopened:
        body.append(SessionReopened(len(body)))
    store.append(stream, [NewEvent(b, conversation_id="root", at=at) for b in body], 0)
    return stream


def ids(store: EventStore) -> list[str]:
    return [info.stream for info in store.streams()]


def test_prune_removes_the_sessions_closed_before_the_date_and_reads_go_on(
    stores: StoreFactory,
) -> None:
    store = stores.open()
    old = write(store, "old", OLD)
    write(store, "old-open", OLD, closed=False)
    write(store, "old-reopened", OLD, reopened=True)
    write(store, "new", NEW)
    write(store, "last", NEW, closed=False)
    before = [e for e in store.read_all(limit=None) if e.stream != old]
    held = [e.position for e in store.read(old)]  # 1 to 3 where positions are dense
    assert held == list(range(held[0], held[0] + 3))  # one append: one run
    report = prune(store, closed_before=DAY, now=NEW)
    assert [r.stream for r in report.pruned] == [old] and report.kept == []
    (record,) = store.pruning.records()
    assert (record.stream, record.events, record.positions) == (old, 3, ((held[0], held[2]),))
    assert record.closed_at == OLD and record.rule == f"closed-before {DAY.isoformat()}"
    assert (record.last_seq, record.pruned_at) == (3, NEW)
    assert ids(store) == ["old-open", "old-reopened", "new", "last"]
    # Every read across streams accepts the gap the record covers.
    assert store.read_all(limit=None) == before
    assert store.read_all(held[1], limit=None) == before
    assert store.read_all(before[0].position, limit=None) == before[1:]
    assert [e for batch in store.batches(batch=3) for e in batch] == before
    assert list(store.iter_all()) == before
    with store.subscribe() as feed:
        assert [feed.get(timeout=5) for _ in before] == before
    # verify accounts for it, and says what the pruned session was.
    report_new = store.verify("new")
    assert report_new.ok and (report_new.pruned_sessions, report_new.pruned_events) == (1, 3)
    gone = store.verify(old)
    assert gone.ok and gone.pruned == record and gone.events == 0
    # A fresh store object (another process) reads the record from the store.
    again = stores.open()
    assert len(list(again.iter_all())) == len(before)


def test_a_gap_no_record_accounts_for_is_still_refused(stores: StoreFactory) -> None:
    store = stores.open()
    write(store, "old", OLD)
    write(store, "kept", NEW)
    write(store, "last", NEW, closed=False)
    prune(store, closed_before=DAY)
    stores.tamper.delete("kept", 2)  # a row deleted by hand: nothing accounts for it
    fresh = stores.open()
    if not fresh.dense_positions:  # PostgreSQL: the stream's own chain tells, and only it
        with pytest.raises(CorruptEventError, match="kept seq 2: event missing"):
            fresh.read_all(limit=None)
        assert not fresh.verify("kept").ok and fresh.verify("last").ok
        return
    gap = "at position 6, where 5 was next"
    with pytest.raises(TamperedError, match=f"kept seq 3: {gap}"):
        fresh.read_all(limit=None)
    with pytest.raises(TamperedError, match="kept seq 3"):
        list(fresh.iter_all())
    report = fresh.verify("last")
    assert not report.ok and "positions jump from 4 to 6" in report.reason


def test_a_dry_run_changes_nothing(stores: StoreFactory) -> None:
    store = stores.open()
    write(store, "old", OLD)
    write(store, "last", NEW, closed=False)
    events = store.read_all(limit=None)
    report = prune(store, closed_before=DAY, dry_run=True)
    assert report.dry_run and [r.stream for r in report.pruned] == ["old"]
    assert store.read_all(limit=None) == events and store.pruning.records() == []


def test_idle_before_never_takes_a_session_a_live_process_owns(stores: StoreFactory) -> None:
    store = stores.open()
    write(store, "owned", OLD, closed=False)
    write(store, "idle", OLD, closed=False)
    write(store, "last", NEW, closed=False)
    store.leases.acquire("owned", "worker-1", 60.0)
    report = prune(store, idle_before=DAY)
    assert [r.stream for r in report.pruned] == ["idle"]
    assert [(k.session_id, k.reason) for k in report.kept] == [
        ("owned", "its lease is held by worker-1")
    ]
    assert report.pruned[0].rule == f"idle-before {DAY.isoformat()}"
    assert ids(store) == ["owned", "last"]


def test_a_blob_another_session_refers_to_stays_and_its_own_go(stores: StoreFactory) -> None:
    store = stores.open()
    shared = "shared " + "s" * DEFAULT_BLOB_THRESHOLD
    write(store, "old", OLD, instructions=shared, padding=1)
    write(store, "other", OLD, instructions=shared, closed=False)
    write(store, "last", NEW, closed=False)
    refs = {r.sha256 for e in store.read("old", resolve_blobs=False) for r in blob_refs(e.body)}
    assert len(refs) == 2
    (kept,) = {
        r.sha256 for e in store.read("other", resolve_blobs=False) for r in blob_refs(e.body)
    }
    report = prune(store, closed_before=DAY)
    assert (report.blobs, report.shared_blobs) == (1, 1)
    assert store.blobs.get(kept) is not None
    assert [store.blobs.get(sha) for sha in refs - {kept}] == [None]
    opened = store.read("other")[1].body
    assert isinstance(opened, ConversationOpened) and opened.base_instructions == shared


def test_a_source_whose_fork_stays_is_kept_and_both_go_when_both_qualify(
    stores: StoreFactory,
) -> None:
    store = stores.open()
    write(store, "source", OLD)
    write(store, "fork", NEW, fork_of="source")
    write(store, "source-2", OLD)
    write(store, "fork-2", OLD, fork_of="source-2")
    write(store, "last", NEW, closed=False)
    report = prune(store, closed_before=DAY)
    assert sorted(r.stream for r in report.pruned) == ["fork-2", "source-2"]
    assert [(k.session_id, k.reason) for k in report.kept] == [("source", "its fork fork stays")]


def test_the_session_holding_the_last_position_waits(stores: StoreFactory) -> None:
    store = stores.open()
    write(store, "old", OLD)
    pruned_last = store.read("old")[-1].position
    if not store.dense_positions:  # PostgreSQL's never come back: nothing to wait for
        assert [r.stream for r in prune(store, closed_before=DAY).pruned] == ["old"]
        write(store, "after", NEW, closed=False)
        assert store.read_all(limit=None)[0].position > pruned_last
        return
    report = prune(store, closed_before=DAY)
    assert report.pruned == [] and "last position" in report.kept[0].reason
    write(store, "next", NEW, closed=False)
    assert [r.stream for r in prune(store, closed_before=DAY).pruned] == ["old"]
    write(store, "after", NEW, closed=False)  # positions go on after the pruned ones
    assert [e.position for e in store.read_all(limit=None)] == [4, 5, 6, 7]


def test_a_new_sqlite_store_gets_smaller(tmp_path: Path) -> None:
    path = tmp_path / "plait.db"
    store = SqliteStore(path)
    write(store, "big", OLD, padding=40)
    write(store, "last", NEW, closed=False)
    on_disk = path.stat().st_size + Path(f"{path}-wal").stat().st_size
    report = prune(store, closed_before=DAY)
    assert report.vacuum == "" and report.bytes_before is not None
    assert report.bytes_after is not None and report.bytes_after < report.bytes_before / 4
    assert path.stat().st_size + Path(f"{path}-wal").stat().st_size < on_disk / 4
    assert store.verify("last").ok
    store.close()


def test_an_older_sqlite_file_is_told_to_vacuum(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "plait.db"
    with sqlite3.connect(path) as db:  # a file made before retention: no auto_vacuum
        db.execute("CREATE TABLE before_plait (x)")
    store = SqliteStore(path)
    write(store, "old", OLD, padding=2)
    write(store, "last", NEW, closed=False)
    assert prune(store, closed_before=DAY).vacuum == f"sqlite3 {path} VACUUM"
    store.close()


def test_signed_sessions_still_verify_and_the_witness_is_checked_against_the_record(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    first = record_inventory(store, "a", signer)
    second = record_inventory(store, "b", signer)
    public, witness = PublicKey.from_file(f"{key}.pub"), Witness(f"{key}.heads")
    store.leases.acquire(second, "another process", 600)  # so it stays, on every store
    report = prune(store, idle_before=datetime(2100, 1, 1, tzinfo=UTC))
    assert [r.stream for r in report.pruned] == [first]
    (record,) = store.pruning.records()
    assert record.signed_seq == record.last_seq - 1 > 0
    kept = store.verify(second, public_key=public, witness=witness)
    assert kept.ok and kept.pruned_sessions == 1, kept.reason
    gone = store.verify(first, public_key=public, witness=witness)
    assert gone.ok and gone.pruned == record and gone.signatures is not None
    assert gone.signatures.witness_seq == record.signed_seq
    # A record that does not say what the witness holds is flagged.
    durable_stores.tamper._execute(
        durable_stores.tamper._sql("UPDATE pruned SET signed_seq = ? WHERE stream = ?"),
        (1, first),
    )
    flagged = durable_stores.open().verify(first, public_key=public, witness=witness)
    assert not flagged.ok and "witness holds a signed head" in flagged.reason
