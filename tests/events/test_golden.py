"""Logs written by earlier plait versions stay readable, forever (``tests/golden/``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from plait.actors import ModelSettings
from plait.events import GENESIS_HASH, BlobRef, TaskCompleted, encode_event, from_jsonl
from plait.events import _packing as packing
from plait.events._codec import event_hash
from plait.events.projections import AuditProjection, HistoryProjection, conversation_index
from plait.events.stores import SqliteStore
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

GOLDEN = Path(__file__).parent.parent / "golden"
VERSIONS = sorted(p.name.removesuffix("-demo.sqlite") for p in GOLDEN.glob("*-demo.sqlite"))


def test_there_is_a_golden_log() -> None:
    assert "v1" in VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_sqlite_log_reads_verifies_and_projects(version: str, tmp_path: Path) -> None:
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)  # opening may write WAL files
    expected = json.loads((GOLDEN / f"{version}-demo.expected.json").read_text())
    with SqliteStore(db) as store:
        session = expected["session"]
        assert store.verify(session).ok
        events = store.read(session)
        assert len(events) == expected["events"]
        assert list(store.iter_all()) == events  # the rebuild's path lifts old versions too
        assert events[-1].hash.hex() == expected["last_hash"]
        histories = HistoryProjection().fold(events)
        index = [
            [i.id, i.parent_id, i.message_count, i.last_active_at]
            for i in conversation_index(histories)
        ]
        assert index == expected["index"]
        assert {
            cid: [m.to_openai() for m in conv.messages]
            for cid, conv in histories.conversations.items()
        } == expected["histories"]
        audit = [
            [r.seq, r.call_id, r.tool, r.outcome, r.output_size]
            for r in AuditProjection().fold(events).rows
        ]
        assert audit == expected["audit"]
        stored = store.read(session, resolve_blobs=False)
        assert any(isinstance(getattr(e.body, "output", None), BlobRef) for e in stored)


@pytest.mark.parametrize("version", VERSIONS)
def test_golden_jsonl_export_reads_and_its_chain_holds(version: str, tmp_path: Path) -> None:
    lines = (GOLDEN / f"{version}-demo.jsonl").read_bytes().splitlines()
    events = list(from_jsonl(lines, source=f"{version}-demo.jsonl"))
    written = [json.loads(line)["v"] for line in lines]  # the versions, before upcasting
    prev = GENESIS_HASH
    for event, v in zip(events, written, strict=True):
        assert event.prev_hash == prev
        if event.v == v:  # an upcast event is not the one hashed: the store checks those below
            # Of encoding 1 (v1) or 2 (v3, v4): either hash is the one the log says.
            hashes = {event_hash(event.stream, encode_event(event, n)) for n in (1, 2)}
            assert event.hash in hashes, f"seq {event.seq}"
        prev = event.hash
    if version == "v1":  # its events were written before some types' versions moved on
        assert any(event.v > v for event, v in zip(events, written, strict=True))
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)
    with SqliteStore(db) as store:
        assert store.verify(events[0].stream).ok
        assert store.read(events[0].stream, resolve_blobs=False) == events


@pytest.mark.parametrize("version", VERSIONS)
def test_a_store_of_an_earlier_layout_is_moved_once_and_owned(version: str, tmp_path: Path) -> None:
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)
    expected = json.loads((GOLDEN / f"{version}-demo.expected.json").read_text())
    session = expected["session"]
    with SqliteStore(db) as store:  # layout 1: no leases, no inbox
        assert store.leases.get(session) is None and store.inbox.commands() == []
        epoch = store.leases.acquire(session, "me", 10).epoch
        assert store.verify(session).ok and len(store.read(session)) == expected["events"]
    with contextlib.closing(sqlite3.connect(db)) as raw:  # its rows moved, its tables gone
        tables = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
        assert "appends" in tables and not {"events", "log", "groups"} & tables
        assert raw.execute("SELECT count(*) FROM appends").fetchone() == (expected["events"],)
    with SqliteStore(db) as store:  # opened again: nothing to move
        lease = store.leases.get(session)
        assert lease is not None and (lease.owner, lease.epoch) == ("me", epoch)
        assert store.verify(session).ok


@pytest.mark.parametrize("version", VERSIONS)
def test_a_store_of_an_earlier_layout_is_read_as_it_is_when_opened_read_only(
    version: str, tmp_path: Path
) -> None:
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)
    before = db.read_bytes()
    expected = json.loads((GOLDEN / f"{version}-demo.expected.json").read_text())
    session = expected["session"]
    with SqliteStore(db, read_only=True) as store:  # plait sessions, log, audit: no leases yet
        assert (
            store.leases.all() == []
            and store.leases.get(session) is None
            and store.inbox.commands() == []
        )
        assert store.verify(session).ok
        events = store.read(session)
        assert len(events) == expected["events"] and store.read_all() == events
        assert events[-1].hash.hex() == expected["last_hash"]
    assert db.read_bytes() == before  # nothing was moved


@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_store_goes_on_in_the_new_encoding_and_verifies(
    version: str, tmp_path: Path
) -> None:
    """A session recorded in an earlier layout is resumed and takes a turn: its new events are
    stored in encoding 3 after its old ones, each moved to a row of its own, and every read and
    ``verify`` cover both (docs/event-log.md#encoding-3)."""
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)
    session = json.loads((GOLDEN / f"{version}-demo.expected.json").read_text())["session"]
    with ScriptedModelServer([Step(text="Still here.")], model="scripted-model") as server:
        model = ModelSettings(base_url=server.base_url, api_key="x", model="scripted-model")
        with Runtime(db, RuntimeSettings(model=model, workdir=tmp_path)) as runtime:
            outcome = runtime.resume(session).run("Are you there?", timeout=60)
            assert outcome.ok and outcome.last_assistant_message == "Still here."
    with SqliteStore(db) as store:
        rows = store.as_stored(session).rows
        kinds = [packing.is_packed(row[6]) for row in rows]
        old = kinds.index(True)
        assert not any(kinds[:old]) and all(kinds[old:])  # moved events, then encoding 3
        assert all(row[4] == b"" and row[3] == 1 for row in rows[:old])
        assert store.verify(session).ok
        events = store.read(session)
        assert events[old - 1].hash == events[old].prev_hash  # one chain across both
        assert list(store.iter_all()) == events == store.read_all()
        assert [e for batch in store.batches(batch=7) for e in batch] == events
        replies = [e.body for e in events if isinstance(e.body, TaskCompleted)]
        assert replies[-1].last_assistant_message == "Still here."


@pytest.mark.parametrize(("version", "table"), [("v1", "events"), ("v3", "log"), ("v4", "groups")])
def test_an_edit_made_before_the_move_is_found_after_it(
    version: str, table: str, tmp_path: Path
) -> None:
    """An old row edited behind the store's back (a byte of its data) is moved as it is: the
    move neither refuses the store nor vouches for the row, and ``verify`` names it as it
    would have."""
    db = tmp_path / "golden.sqlite"
    shutil.copy(GOLDEN / f"{version}-demo.sqlite", db)
    session = json.loads((GOLDEN / f"{version}-demo.expected.json").read_text())["session"]
    with contextlib.closing(sqlite3.connect(db)) as raw, raw:
        ((data,),) = raw.execute(f"SELECT data FROM {table} WHERE seq = 5")
        edited = bytearray(data)
        edited[len(edited) // 2] ^= 0x01
        raw.execute(f"UPDATE {table} SET data = ? WHERE seq = 5", (bytes(edited),))
    with SqliteStore(db) as store:
        report = store.verify(session)
        assert (report.ok, report.first_bad_seq) == (False, 5), report
