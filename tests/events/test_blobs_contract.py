"""The blobs part of the store contract (``store.blobs``: ``plait.events._blobstore``), on every
backend: content kept beside the log by its sha-256, read back with the events that name it,
deleted leaving a tombstone, erased."""

from __future__ import annotations

import pytest

from plait.events import (
    BlobRef,
    ConversationOpened,
    EventStore,
    NewEvent,
    Redacted,
    StoragePolicy,
    ToolCallCompleted,
)
from plait.events._blobstore import REDACTED

BIG = "x" * 20_000


def test_large_content_is_stored_once_and_read_back(store: EventStore) -> None:
    events = [
        NewEvent(ToolCallCompleted(call_id="c1", output=BIG), "root"),
        NewEvent(ToolCallCompleted(call_id="c2", output=BIG), "root"),
        NewEvent(ToolCallCompleted(call_id="c3", output="small"), "root"),
    ]
    written = store.append("s1", events, 0)
    assert [w.body for w in written] == [e.body for e in events]
    assert [e.body for e in store.read("s1")] == [e.body for e in events]
    raw = store.read("s1", resolve_blobs=False)
    refs = [e.body.output for e in raw if isinstance(e.body, ToolCallCompleted)]
    assert isinstance(refs[0], BlobRef) and refs[0] == refs[1]
    assert refs[0].size == len(BIG)
    assert refs[2] == "small"
    assert store.blobs.get(refs[0].sha256) == BIG.encode()


TTL = NewEvent(ConversationOpened(storage_policy=StoragePolicy("ttl", 60)), "root")
"""A conversation whose content may expire (docs/storage.md#expiry)."""


def test_redacting_a_blob_keeps_the_chain_and_shows_a_marker(store: EventStore) -> None:
    store.append("s1", [TTL, NewEvent(ToolCallCompleted(call_id="c", output=BIG), "root")], 0)
    raw = store.read("s1", resolve_blobs=False)[1].body
    assert isinstance(raw, ToolCallCompleted) and isinstance(raw.output, BlobRef)
    assert store.blobs.redact(raw.output.sha256) is True
    body = store.read("s1")[1].body
    assert isinstance(body, ToolCallCompleted)
    assert body.output == Redacted(sha256=raw.output.sha256, size=len(BIG))
    report = store.verify("s1")
    assert report.ok and report.redacted == 1 and report.blobs == 1
    assert store.blobs.redact("0" * 64) is False


@pytest.mark.parametrize("policy", [StoragePolicy(), None])
def test_a_deleted_blob_is_damage_unless_its_policy_lets_it_expire(
    store: EventStore, policy: StoragePolicy | None
) -> None:
    # A full conversation's content (or content outside any conversation) is never deleted
    # on purpose: its blob gone is damage, whether or not a tombstone is left.
    cid = "root" if policy is not None else None
    opened = [NewEvent(ConversationOpened(storage_policy=policy), "root")] if policy else []
    store.append("s1", [*opened, NewEvent(ToolCallCompleted(call_id="c", output=BIG), cid)], 0)
    raw = store.read("s1", resolve_blobs=False)[-1].body
    assert isinstance(raw, ToolCallCompleted) and isinstance(raw.output, BlobRef)
    store.blobs.redact(raw.output.sha256)
    report = store.verify("s1")
    whose = "conversation root's" if cid else "the session's"
    assert (report.ok, report.first_bad_seq, report.redacted) == (False, len(opened) + 1, 0)
    assert report.reason == (
        f"blob sha256:{raw.output.sha256} was deleted, but {whose} storage policy is full "
        "and no erasure covers it: only ttl content expires"
    )


def test_rewriting_redacted_content_restores_it(store: EventStore) -> None:
    store.append("s1", [NewEvent(ToolCallCompleted(call_id="c", output=BIG))], 0)
    ref = store.read("s1", resolve_blobs=False)[0].body
    assert isinstance(ref, ToolCallCompleted) and isinstance(ref.output, BlobRef)
    store.blobs.redact(ref.output.sha256)
    store.append("s1", [NewEvent(ToolCallCompleted(call_id="d", output=BIG))], 1)
    bodies = [e.body for e in store.read("s1")]
    assert all(isinstance(b, ToolCallCompleted) and b.output == BIG for b in bodies)


def test_a_blobs_state_tells_a_tombstone_from_a_blob_never_stored(store: EventStore) -> None:
    store.append("s1", [TTL, NewEvent(ToolCallCompleted(call_id="c", output=BIG), "root")], 0)
    raw = store.read("s1", resolve_blobs=False)[1].body
    assert isinstance(raw, ToolCallCompleted) and isinstance(raw.output, BlobRef)
    sha, unknown = raw.output.sha256, "0" * 64
    assert store.blobs.state(sha) == BIG.encode() == store.blobs.get(sha)
    assert store.blobs.state(unknown) is None and store.blobs.get(unknown) is None
    assert store.blobs.states([sha, unknown]) == {sha: BIG.encode()}  # the stored ones only
    store.blobs.redact(sha)
    assert store.blobs.state(sha) is REDACTED and store.blobs.get(sha) is None
    assert store.blobs.states([sha, unknown]) == {sha: REDACTED}


def test_erasing_counts_the_blobs_that_held_content_once(store: EventStore) -> None:
    outputs = [BIG, BIG + "y"]
    events = [
        NewEvent(ToolCallCompleted(call_id=f"c{i}", output=o), "root")
        for i, o in enumerate(outputs)
    ]
    store.append("s1", [TTL, *events], 0)
    bodies = [e.body for e in store.read("s1", resolve_blobs=False)]
    shas = [
        body.output.sha256
        for body in bodies
        if isinstance(body, ToolCallCompleted) and isinstance(body.output, BlobRef)
    ]
    assert len(shas) == 2
    assert store.blobs.erase([*shas, shas[0], "0" * 64]) == 2  # each once; one unknown
    assert all(store.blobs.state(sha) is REDACTED for sha in shas)
    assert store.blobs.erase(shas) == 0  # nothing left to erase
    assert store.verify("s1").ok


def test_a_scope_is_its_name_and_a_salt_the_same_for_the_name_in_one_store(
    store: EventStore,
) -> None:
    scope = store.blobs.scope("s1")
    assert scope.startswith(b"s1\n") and len(scope) == len(b"s1\n") + 16
    assert store.blobs.scope("s1") == scope != store.blobs.scope("s1:2")
