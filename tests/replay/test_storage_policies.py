"""Storage policies (docs/storage.md): the log keeps what each conversation's policy allows, and
what needs more says so.

Every session here runs the same script: a task whose model creates a sub-conversation,
which answers; the root then answers; then a second task. Every piece of content holds
``SECRET``, so a policy that must not store content is checked on the database file's bytes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import timedelta
from pathlib import Path

import pytest
from scripted import assert_histories_valid, call, runtime_for
from support import kept_forms, on_disk

from plait import ContentUnavailableError
from plait.events import (
    Event,
    ModelResponded,
    Redacted,
    SqliteStore,
    StoragePolicy,
    TaskStarted,
    ToolCallRequested,
    TurnAborted,
)
from plait.events._storage import KEPT_BY_NONE, Expiry
from plait.replay import audit, fork, replay
from plait.testing import ScriptedModelServer, Step

ARGUMENTS = json.dumps({"user_instruction": "SECRET sub task"})


def run(tmp_path: Path, policy: StoragePolicy) -> tuple[str, list[Event], ScriptedModelServer]:
    """Run the script in a session with ``policy``; return its id, its log and the server."""
    ids = itertools.count(1)
    with ScriptedModelServer() as server:
        server.push(
            Step(tool_calls=[call("conv_create", user_instruction="SECRET sub task")]),
            Step(text="SECRET sub answer"),
            Step(text="SECRET final"),
            Step(text="SECRET second"),
        )
        with runtime_for(server, tmp_path, new_id=lambda: f"{policy.kind}-{next(ids)}") as rt:
            session = rt.start_session(user_instructions="SECRET standing", storage_policy=policy)
            assert session.run("SECRET first", timeout=30).last_assistant_message == "SECRET final"
            second = session.run("SECRET again", timeout=30)
            assert second.last_assistant_message == "SECRET second"
    with SqliteStore(tmp_path / "plait.db") as store:
        return session.session_id, store.read(session.session_id), server


def keeps(tmp_path: Path, text: bytes) -> bool:
    """Whether the store keeps ``text`` (compressed, in a store of layout 4), on disk."""
    return on_disk(tmp_path / "plait.db", kept_forms(tmp_path / "plait.db", text))


def kinds(events: list[Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_full_keeps_every_event_with_its_content(tmp_path: Path) -> None:
    _, events, _ = run(tmp_path, StoragePolicy())
    assert keeps(tmp_path, b"SECRET sub answer")
    assert len([e for e in events if e.conversation_id == "full-4"]) > 2  # the sub-conversation


def test_headers_only_keeps_every_event_and_no_content(tmp_path: Path) -> None:
    _, full, _ = run(tmp_path / "full", StoragePolicy())
    session_id, events, server = run(tmp_path, StoragePolicy("headers_only"))
    assert kinds(events) == kinds(full)
    assert not keeps(tmp_path, b"SECRET")
    requested = next(e.body for e in events if isinstance(e.body, ToolCallRequested))
    assert requested.tool == "conv_create"  # names, ids, outcomes and sizes stay
    assert requested.arguments == Redacted(sha256(ARGUMENTS), len(ARGUMENTS))
    with SqliteStore(tmp_path / "plait.db") as store:
        assert store.verify(session_id).ok
    assert_histories_valid(events)
    # The live session had its content: the second task's request carried the first's.
    last = server.requests[-1].messages
    assert {"role": "assistant", "content": "SECRET final"} in last


def test_none_keeps_only_starts_ends_and_errors(tmp_path: Path) -> None:
    session_id, events, _ = run(tmp_path, StoragePolicy("none"))
    assert not keeps(tmp_path, b"SECRET")
    kept = {type(e.body) for e in events if e.conversation_id is not None}
    assert kept <= KEPT_BY_NONE
    assert kinds([e for e in events if e.conversation_id == "none-4"]) == [
        "ConversationOpened",
        "TaskEnqueued",
        "TaskStarted",
        "TaskCompleted",
    ]  # the sub-conversation inherited the policy
    with SqliteStore(tmp_path / "plait.db") as store:
        assert store.verify(session_id).ok
        with pytest.raises(ContentUnavailableError, match="storage policy none"):
            audit(store, session_id, conversation_id="none-2")


def test_ttl_content_expires_and_the_chain_still_verifies(tmp_path: Path) -> None:
    full_id, _, _ = run(tmp_path, StoragePolicy())  # the same content, kept in full
    ttl_id, events, _ = run(tmp_path, StoragePolicy("ttl", 3600))
    with SqliteStore(tmp_path / "plait.db") as store:
        assert replay(store, ttl_id, timeout=5).ok  # before it expires, all is there
        expiry = Expiry(store)
        assert expiry.sweep(events[-1].at + timedelta(minutes=59)) == 0
        assert expiry.sweep(events[-1].at + timedelta(hours=2)) > 0
        assert expiry.sweep(events[-1].at + timedelta(hours=3)) == 0  # once is enough
        expired = store.read(ttl_id)
        assert kinds(expired) == kinds(events)
        answer = next(e for e in expired if isinstance(e.body, ToolCallRequested))
        assert isinstance(answer.body.arguments, Redacted)
        checked = store.verify(ttl_id)
        assert checked.ok
        assert checked.redacted == checked.blobs > 0
        # The session kept in full shares the content, not the blobs: it still has it.
        assert "SECRET sub answer" in json.dumps([str(e.body) for e in store.read(full_id)])
        with pytest.raises(ContentUnavailableError, match=r"seq \d+ .*expired"):
            replay(store, ttl_id, timeout=5)
    assert keeps(tmp_path, b"SECRET")  # the full session's
    alone = tmp_path / "alone"
    ttl_id, events, _ = run(alone, StoragePolicy("ttl", 3600))
    forms = kept_forms(alone / "plait.db", b"SECRET")
    assert on_disk(alone / "plait.db", forms)
    with SqliteStore(alone / "plait.db") as store:
        Expiry(store).sweep(events[-1].at + timedelta(hours=2))
    assert not on_disk(alone / "plait.db", forms)  # deleted from the file, not only unlinked
    assert not keeps(alone, b"SECRET")


def test_what_needs_content_the_policy_did_not_keep_says_so(tmp_path: Path) -> None:
    session_id, events, _ = run(tmp_path, StoragePolicy("headers_only"))
    reason = "conversation headers_only-2 is stored with storage policy headers_only"
    with SqliteStore(tmp_path / "plait.db") as store:
        with pytest.raises(ContentUnavailableError, match=f"cannot replay: {reason}"):
            replay(store, session_id)
        with pytest.raises(ContentUnavailableError, match=f"cannot fork at seq 5: {reason}"):
            fork(store, session_id, 5)
        with (
            ScriptedModelServer() as server,
            runtime_for(server, tmp_path) as runtime,
            pytest.raises(ContentUnavailableError, match=f"cannot resume: {reason}"),
        ):
            runtime.resume(session_id)
        assert store.read(session_id) == events  # nothing was recorded
        rows = audit(store, session_id)  # audit works: names, outcomes, sizes, hashes
        assert [(r.tool, r.outcome) for r in rows] == [("conv_create", "ok")]
        assert rows[0].arguments == Redacted(sha256(ARGUMENTS), len(ARGUMENTS))


def test_recover_resumes_every_session_a_crash_left_running(tmp_path: Path) -> None:
    full_id, events, _ = run(tmp_path, StoragePolicy())
    ttl_id, _, _ = run(tmp_path, StoragePolicy("ttl", 60))
    started = next(e.seq for e in events if isinstance(e.body, TaskStarted))
    with SqliteStore(tmp_path / "plait.db") as store:
        # A fork cut inside a task is a session a process left running; the ttl one's content
        # then expires, so it cannot go on.
        cut = fork(store, full_id, started, new_session_id="cut")
        gone = fork(store, ttl_id, started, new_session_id="gone")
        Expiry(store).sweep(events[-1].at + timedelta(hours=1))
        with (
            ScriptedModelServer([Step(text="again")]) as server,
            runtime_for(server, tmp_path, new_id=lambda: "new") as runtime,
        ):
            found = {r.session_id: r for r in runtime.recover()}
            assert sorted(found) == ["cut", "gone"]  # the finished sessions are left alone
            assert found[cut].not_resumed == ""
            assert "expired under a ttl storage policy" in found[gone].not_resumed
            assert found[cut].crashed_task and found[gone].crashed_task
            after = runtime.resume(cut).run("and now?", timeout=30)
            assert after.last_assistant_message == "again"
            assert runtime.recover() == []  # nothing left in flight
        for session_id in (cut, gone):
            recovered = store.read(session_id)
            aborted = [e.body for e in recovered if isinstance(e.body, TurnAborted)]
            assert [a.reason for a in aborted] == ["crashed"]
            assert store.verify(session_id).ok
        assert_histories_valid(store.read(cut))


def test_a_runtime_with_ttl_content_sweeps_it_and_stops_when_closed(tmp_path: Path) -> None:
    with ScriptedModelServer([Step(text="SECRET soon gone")]) as server:
        with runtime_for(server, tmp_path, expire_every_sec=None) as runtime:
            session = runtime.start_session(storage_policy=StoragePolicy("ttl", 0.001))
            session.run("SECRET brief", timeout=30)
            # Due a second after the last event: the sweep does not race the store's clock.
            last = runtime.store.read(session.session_id)[-1].at
            assert runtime.expire_content(now=last + timedelta(seconds=1)) == 3
            events = runtime.store.read(session.session_id)
            answer = next(e.body for e in events if isinstance(e.body, ModelResponded))
            assert isinstance(answer.text, Redacted)
            assert runtime.store.verify(session.session_id).ok
        idle = runtime_for(server, tmp_path, expire_every_sec=0.01)
        assert idle._sweeping.timer is None  # no ttl content in use: no store scans
        idle.close()
        ttl = StoragePolicy("ttl", 60)
        sweeping = runtime_for(server, tmp_path, expire_every_sec=0.01, storage_policy=ttl)
        timer = sweeping._sweeping.timer
        assert timer is not None and not timer.cancelled
        assert sweeping.timers.running
        sweeping.close()
        assert timer.cancelled and not sweeping.timers.running
