"""``plait du``: what each session's log takes, on both stores
(docs/storage.md#storage-you-can-see)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from scripted import call, record_session
from support import StoreFactory

from plait.events import DEFAULT_BLOB_THRESHOLD
from plait.testing import Step

if TYPE_CHECKING:
    from conftest import Cli

REPORT = "r" * (DEFAULT_BLOB_THRESHOLD + 100)
"""A long tool output."""


def report(quarter: str) -> str:
    """Fetch a long report."""
    return REPORT


def test_du_shows_each_sessions_events_bytes_and_shared_blobs(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    script = [Step(tool_calls=[call("report", quarter="q3")]), Step(text="Read it.")]
    store = durable_stores.open()
    first = record_session(store, script, ["Get the report."], "one", tools=[report])
    second = record_session(store, script, ["Get it again."], "two", tools=[report])
    plain = record_session(store, [Step(text="Hi.")], ["Hello."], "three")
    expected = {s: len(store.read(s)) for s in (first, second, plain)}
    store.close()
    where = ("--store", durable_stores.url)
    listed = cli(*where, "du", "--json")
    assert listed.returncode == 0, listed.stderr
    *rows, last = [json.loads(line) for line in listed.stdout.splitlines()]
    by_id = {row["session_id"]: row for row in rows}
    assert {s: r["events"] for s, r in by_id.items()} == expected
    # Sessions keep their content apart, each in its own blobs (so ``forget`` can erase it):
    # the same report twice is two blobs, neither shared.
    for session in (first, second):
        assert by_id[session]["blob_bytes"] >= len(REPORT)
        assert (by_id[session]["shared_blobs"], by_id[session]["shared_blob_bytes"]) == (0, 0)
    assert by_id[first]["blob_bytes"] > by_id[plain]["blob_bytes"]
    kinds = {k["type"]: k["events"] for k in by_id[plain]["by_type"]}
    assert kinds["ModelResponded"] == 1 and kinds["TaskCompleted"] == 1
    packed = sum(k["bytes"] for k in by_id[plain]["by_type"])
    if durable_stores.backend == "sqlite":  # its rows compressed (layout 4): as stored
        assert 0 < by_id[plain]["bytes"] < packed
    else:
        assert packed == by_id[plain]["bytes"]
    assert last["store"]["total"] > by_id[first]["bytes"] + by_id[second]["bytes"]
    shown = cli(*where, "du", plain[:8])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["session", "events", "log", "blobs", "blob", "bytes", "shared"]
    assert lines[1].split()[:2] == [plain[:8], str(expected[plain])]
    assert any(line.startswith("ModelResponded ") for line in lines)
    assert lines[-1].startswith("store: ")
