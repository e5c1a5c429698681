"""``plait verify`` on damage a row-by-row walk of one session does not see: a blob deleted
from a session kept in full, and positions with a gap (docs/event-log.md#the-hash-chain). On
each durable backend, through the command, one line naming where, exit 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import StoreFactory

from plait.events import (
    BlobRef,
    ConversationOpened,
    NewEvent,
    SessionStarted,
    StoragePolicy,
    ToolCallCompleted,
    TurnStarted,
)

if TYPE_CHECKING:
    from conftest import Cli

BIG = "x" * 20_000


def session(policy: StoragePolicy) -> list[NewEvent]:
    """A session whose root conversation, of ``policy``, got a tool output held in a blob."""
    return [
        NewEvent(SessionStarted(root_conversation_id="root")),
        NewEvent(ConversationOpened(storage_policy=policy), "root"),
        NewEvent(ToolCallCompleted(call_id="c", output=BIG), "root", "t1"),
    ]


@pytest.mark.parametrize("policy", ["full", "ttl:60"])
def test_a_blob_deleted_from_a_full_session_is_tampering(
    cli: Cli, durable_stores: StoreFactory, policy: str
) -> None:
    store = durable_stores.open()
    store.append("s1", session(StoragePolicy.parse(policy)), 0)
    body = store.read("s1", resolve_blobs=False)[2].body
    assert isinstance(body, ToolCallCompleted) and isinstance(body.output, BlobRef)
    assert cli("--store", durable_stores.url, "verify", "s1").returncode == 0
    store.blobs.redact(body.output.sha256)  # what an expiry does; only a ttl policy allows it
    done = cli("--store", durable_stores.url, "verify", "s1")
    if policy.startswith("ttl"):
        assert (done.returncode, done.stdout) == (0, "ok: 3 events, 1 blobs (1 redacted)\n")
    else:
        assert (done.returncode, done.stdout) == (
            1,
            f"tampered: seq 3: blob sha256:{body.output.sha256} was deleted, but conversation "
            "root's storage policy is full and no erasure covers it: only ttl content expires\n",
        )


@pytest.fixture
def sqlite_stores(tmp_path: Path) -> Iterator[StoreFactory]:
    """SQLite stores, whose positions are dense (docs/event-log.md#streams-seq-and-position)."""
    factory = StoreFactory("sqlite", tmp_path)
    yield factory
    factory.close()


def test_a_gap_in_positions_is_tampering_whichever_session_is_verified(
    cli: Cli, sqlite_stores: StoreFactory
) -> None:
    store = sqlite_stores.open()
    store.append("s1", session(StoragePolicy()), 0)
    store.append("s2", [TurnStarted(turn=1), TurnStarted(turn=2)], 0)
    store.append("s3", [TurnStarted(turn=1)], 0)
    for seq in (1, 2):  # a whole session gone, its head too: only its positions are missed
        sqlite_stores.tamper.delete("s2", seq)
    sqlite_stores.tamper.delete_head("s2")
    gap = (
        "positions jump from 3 to 6 (stream s3 seq 1): 4 to 5 missing; positions are dense "
        "from 1, so a row moved or was lost\n"
    )
    assert cli("--store", sqlite_stores.url, "verify", "s3").stdout == f"tampered: seq 1: {gap}"
    done = cli("--store", sqlite_stores.url, "verify", "s1")
    assert (done.returncode, done.stdout) == (1, f"tampered: {gap}")
