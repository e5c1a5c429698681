"""Audit every tool call, filtered; verify finds any flipped byte of a stored log."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from plait import PlaitError
from plait.events import (
    ConversationOpened,
    InputText,
    MemoryStore,
    NewEvent,
    SessionStarted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
)
from plait.events.stores import SqliteStore
from plait.replay import audit, audit_jsonl, verify

GOLDEN = Path(__file__).with_name("golden") / "v1-sessions.sqlite"


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    copy = tmp_path_factory.mktemp("audit") / "golden.sqlite"
    shutil.copy(GOLDEN, copy)
    return SqliteStore(copy)


def test_every_call_with_its_server_outcome_and_size(golden: SqliteStore) -> None:
    rows = audit(golden, "g2-1")  # the MCP session of the golden logs
    assert [(r.tool, r.outcome, r.server) for r in rows] == [
        ("t__rendezvous", "ok", "t"),
        ("t__rendezvous", "ok", "t"),
        ("t__echo", "ok", "t"),
        ("t__note", "ok", "t"),
        ("t__add", "error", "t"),  # arguments that do not fit the schema
        ("t__invented", "refused", None),  # never offered, never sent
    ]
    assert all(r.output_size and r.completed_at and r.conversation_id for r in rows)
    assert rows[0].started_at is not None and rows[-1].started_at is None


def test_filters_narrow_the_rows(golden: SqliteStore) -> None:
    assert [r.tool for r in audit(golden, "g2-1", outcome="refused")] == ["t__invented"]
    assert len(audit(golden, "g2-1", tool="t__")) == 6
    assert len(audit(golden, "g2-1", tool="t__echo")) == 1
    rows = audit(golden, "g1-1")
    assert {r.tool for r in rows} >= {"conv_create", "conv_list", "conv_history", "conv_send"}
    child = rows[1].conversation_id
    assert {r.conversation_id for r in audit(golden, "g1-1", conversation_id=child)} == {child}
    late = audit(golden, "g1-1", since=rows[-1].requested_at)
    assert [r.call_id for r in late] == [rows[-1].call_id]


def test_json_lines_carry_every_field(golden: SqliteStore) -> None:
    lines = audit_jsonl(audit(golden, "g2-1")).decode().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == 6 and first["tool"] == "t__rendezvous" and first["server"] == "t"
    assert {"conversation_id", "task_id", "call_id", "arguments", "approval", "duration_ms"} <= set(
        first
    )


def test_an_unknown_session_is_a_clear_error() -> None:
    with pytest.raises(PlaitError, match="no session nope"):
        audit(MemoryStore(), "nope")
    with pytest.raises(PlaitError, match="no session nope"):
        verify(MemoryStore(), "nope")


def test_every_flipped_byte_of_a_stored_log_is_found(tmp_path: Path) -> None:
    path = tmp_path / "small.db"
    plan = TaskPlan("t1", "root", [InputText("hello")])
    with SqliteStore(path) as store:
        store.append(
            "s",
            [
                SessionStarted("root", model="m"),
                NewEvent(ConversationOpened(), "root"),
                NewEvent(TaskEnqueued(plan), "root", "t1"),
                NewEvent(TaskStarted(), "root", "t1"),
            ],
            0,
        )
    db = sqlite3.connect(path)
    # A row keeps an append: a flip anywhere in it is found at its first event.
    rows = db.execute("SELECT seq - count + 1, position, data, hash FROM appends").fetchall()
    flips = ignored = 0
    with SqliteStore(path) as store:
        events = store.read("s")
        for seq, position, data, digest in rows:
            for column, original in (("data", data), ("hash", digest)):
                for i in range(len(original)):
                    changed = bytearray(original)
                    changed[i] ^= 0x01
                    sql = f"UPDATE appends SET {column} = ? WHERE position = ?"
                    db.execute(sql, (changed, position))
                    db.commit()
                    result = verify(store, "s")
                    if result.ok:  # a bit zstd does not read
                        assert store.read("s") == events, (column, seq, i)
                        ignored += 1
                    else:
                        assert result.first_bad_seq == seq, (column, seq, i)
                    flips += 1
                db.execute(
                    f"UPDATE appends SET {column} = ? WHERE position = ?", (original, position)
                )
                db.commit()
        assert verify(store, "s").ok
    assert flips == sum(len(data) + len(digest) for _, _, data, digest in rows) > 100
    assert ignored < flips / 20  # bits zstd does not read: a few
