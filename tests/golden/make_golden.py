"""Write the golden logs of this plait version: ``python tests/golden/make_golden.py VERSION``.

Run once per schema generation and commit the files; never regenerate an existing version's
files: they stand for logs users already have, and ``test_golden.py`` must read them forever.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))  # the tests' support modules

from recorded import demo_events

from plait.events.codec import to_jsonl
from plait.events.projections import AuditProjection, HistoryProjection, conversation_index
from plait.events.stores.sqlite import SqliteStore

HERE = Path(__file__).parent
START = datetime(2026, 11, 23, 9, 0, 0, tzinfo=UTC)


def main(version: str) -> None:
    """Write ``VERSION-demo.sqlite``, ``.jsonl`` and ``.expected.json`` beside this script."""
    db = HERE / f"{version}-demo.sqlite"
    if db.exists():
        sys.exit(f"{db} exists: golden logs are never rewritten")
    ids = iter(f"{i:08x}-0000-4000-8000-000000000000" for i in range(100))
    session, items = demo_events(START, lambda: next(ids))
    # A low blob threshold puts the longer contents in the blob table, so blobs are covered too.
    with SqliteStore(db, blob_threshold=64) as store:
        store.append(session, items, 0)
        stored = store.read(session, resolve_blobs=False)
        (HERE / f"{version}-demo.jsonl").write_bytes(b"".join(to_jsonl(stored)))
        events = store.read(session)
        db_wal = db.with_name(db.name + "-wal")
        store._link.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in (db_wal, db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    histories = HistoryProjection().fold(events)
    expected = {
        "session": session,
        "events": len(events),
        "last_hash": events[-1].hash.hex(),
        "index": [
            [i.id, i.parent_id, i.message_count, i.last_active_at]
            for i in conversation_index(histories)
        ],
        "histories": {
            cid: [m.to_openai() for m in conv.messages]
            for cid, conv in histories.conversations.items()
        },
        "audit": [
            [r.seq, r.call_id, r.tool, r.outcome, r.output_size]
            for r in AuditProjection().fold(events).rows
        ],
    }
    (HERE / f"{version}-demo.expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
