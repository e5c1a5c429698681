"""What each session's log takes (``plait.events._usage``), on every store."""

from __future__ import annotations

from support import StoreFactory

from plait.events import DEFAULT_BLOB_THRESHOLD, SessionStarted, ToolCallCompleted, usage
from plait.events._stored import PER_APPEND

BIG = "x" * (DEFAULT_BLOB_THRESHOLD + 1)
"""Past the threshold: kept once, content-addressed, whoever records it."""


def test_a_blob_two_sessions_refer_to_is_shared_and_counted_once_each(
    stores: StoreFactory,
) -> None:
    store = stores.open()
    for session in ("a", "b"):
        store.append(session, [SessionStarted("root"), ToolCallCompleted("c1", BIG)], 0)
    store.append("c", [SessionStarted("root"), ToolCallCompleted("c1", "small")], 0)
    found = {row.session_id: row for row in usage(store)}
    assert list(found) == ["a", "b", "c"]
    for session in ("a", "b"):
        row = found[session]
        assert (row.blobs, row.blob_bytes) == (1, len(BIG))
        assert (row.shared_blobs, row.shared_blob_bytes) == (1, len(BIG))
    assert (found["c"].blobs, found["c"].shared_blobs) == (0, 0)
    stored = store.as_stored("c")
    if stored.layout == PER_APPEND:  # its data, and the hashes it keeps
        rows = sum(len(r[4]) + len(r[5]) + len(r[6]) for r in stored.rows)
    else:  # its data and its hash
        rows = sum(len(r[1]) + len(r[2]) for r in stored.rows)
    kept = store.stored_bytes("c")  # where rows keep fewer (SQLite's: no prev_hash)
    assert found["c"].bytes == (rows if kept is None else kept)
    kinds = found["c"].by_type
    assert {k.type: k.events for k in kinds} == {"SessionStarted": 1, "ToolCallCompleted": 1}
    assert [k.bytes for k in kinds] == sorted((k.bytes for k in kinds), reverse=True)
    [only] = usage(store, ["a"])  # shared is still judged against every session
    assert (only.session_id, only.shared_blobs) == ("a", 1)
