"""What one plain turn costs on disk (docs/storage.md#the-bytes-of-one-turn): a budget a
change to the encoding or the turn's events must keep, measured as ``bench/storage.py`` does."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from plait.actors import ModelSettings
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

EVENT_BYTES_PER_TURN = 680
"""Stored bytes of a plain turn's seven events, in the two rows of its appends, their hashes
and their content: 648 in layout 5 (encoding 3; layout 4 took 441, chaining each row's
compression to the rows before it; layout 3 1,977 and its blobs, encoding 1 2,600)."""
FILE_BYTES_PER_TURN = 920
"""What the SQLite file grows by a plain turn, rows, indexes and all: 881 bytes in a store of
layout 5, 594 in one of layout 4, 3,154 in one of layout 3
(docs/storage.md#the-bytes-of-one-turn)."""


def test_a_plain_turn_keeps_to_its_byte_budget(tmp_path: Path) -> None:
    db = tmp_path / "budget.sqlite"
    first, turns = 20, 100
    replies = [
        Step(text=f"Hello, guest {i}! Good to meet you. What shall we work on together today?")
        for i in range(first + turns)
    ]
    with ScriptedModelServer(replies, model="scripted-model") as server:
        model = ModelSettings(base_url=server.base_url, api_key="x", model="scripted-model")
        with Runtime(db, RuntimeSettings(model=model, workdir=tmp_path)) as runtime:
            session = runtime.start_session()
            for i in range(first):
                assert session.run(f"Say hello to guest {i}.", timeout=60).ok
            before = _measure(db)
            for i in range(first, first + turns):
                assert session.run(f"Say hello to guest {i}.", timeout=60).ok
            after = _measure(db)
    events, data, size = (b - a for a, b in zip(before, after, strict=True))
    assert events == 7 * turns  # enqueued, started, turn, request, reply, tokens, completed
    assert data / turns <= EVENT_BYTES_PER_TURN, f"{data / turns:.0f} B of events a turn"
    assert size / turns <= FILE_BYTES_PER_TURN, f"the file grows {size / turns:.0f} B a turn"


def _measure(db: Path) -> tuple[int, int, int]:
    """Events, the bytes of their rows (data, hash, content), and the file's size, its
    write-ahead log checkpointed."""
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        ((events, data),) = conn.execute(
            "SELECT sum(count), sum(length(data) + coalesce(length(prev_hash), 0) + length(hash) "
            "+ coalesce(length(content), 0)) "
            "FROM appends"
        )
        ((pages, size),) = conn.execute(
            "SELECT page_count, page_size FROM pragma_page_count, pragma_page_size"
        )
    return int(events), int(data), int(pages) * int(size)
