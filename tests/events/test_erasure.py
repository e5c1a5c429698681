"""Erasure from Python (docs/storage.md#erasure): ``forget`` of one conversation keeps what
another still holds, refuses what it cannot do cleanly, and leaves a log that verifies;
sessions of every storage policy, each backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted import call, record_session
from support import StoreFactory

from plait import ContentUnavailableError, ErasureError
from plait.events import (
    Command,
    ContentErased,
    ConversationOpened,
    EventStore,
    InputText,
    NewEvent,
    PublicKey,
    Redacted,
    SessionStarted,
    Signer,
    StoragePolicy,
    SubmitTask,
    TaskEnqueued,
    TaskPlan,
    forget,
    generate_key,
)
from plait.events.projections import HistoryProjection
from plait.events.projections._messages import shown_text
from plait.replay import fork, replay
from plait.testing import Step

HANDOFF = [
    Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count 7.")]),
    Step(text="The helper says 7."),
    Step(text="It is 7."),
]


def conversations(store: EventStore, session: str) -> tuple[str, str]:
    """The root and the conversation it created."""
    opened = [e for e in store.read(session) if isinstance(e.body, ConversationOpened)]
    root, helper = (e.conversation_id for e in opened)
    assert root is not None and helper is not None
    return root, helper


def texts(store: EventStore, session: str, conversation: str) -> list[str]:
    state = HistoryProjection().fold(store.read(session))
    return [shown_text(m.content) for m in state.conversations[conversation].messages]


def test_forgetting_one_conversation_keeps_what_its_creator_holds_too(store: EventStore) -> None:
    session = record_session(store, HANDOFF, ["How many?"], "one")
    root, helper = conversations(store, session)
    erasure = forget(store, session, conversations=[helper], requested_by="desk")
    # The helper's first message is also the creator's conv_create argument: kept for it.
    assert erasure.blobs > 0 and erasure.kept >= 1 and not erasure.again
    assert store.verify(session).ok
    assert "How many?" in " ".join(texts(store, session, root))
    helper_texts = texts(store, session, helper)
    assert "The helper says 7." not in helper_texts and "[erased]" in helper_texts
    last = store.read(session)[-1]
    assert isinstance(last.body, ContentErased) and last.body.conversations == [helper]
    with pytest.raises(ContentUnavailableError, match=r"conversation .* content was erased"):
        replay(store, session)


def test_an_erased_session_cannot_be_forked_and_says_why(store: EventStore) -> None:
    session = record_session(store, [Step(text="Hi.")], ["Hello"], "fk")
    forget(store, session, requested_by="desk", reason="req 9")
    with pytest.raises(ContentUnavailableError, match=r"erased on request at seq \d+ by desk"):
        fork(store, session, 3)


def test_content_inside_hashed_events_is_refused_and_nothing_is_recorded(
    store: EventStore,
) -> None:
    # A session started before content was kept apart: its small content is in its events.
    plan = TaskPlan("t1", "root", [InputText("my secret")])
    store.append(
        "old",
        [
            SessionStarted("root"),
            NewEvent(ConversationOpened(), "root"),
            NewEvent(TaskEnqueued(plan), "root", "t1"),
        ],
        0,
    )
    with pytest.raises(ErasureError) as refused:
        forget(store, "old")
    assert str(refused.value) == (
        "session old: cannot erase: seq 3 (TaskEnqueued) holds its content inside the event "
        "the hash chain covers (the session was started before plait kept content apart): "
        "erasing it would break the chain"
    )
    assert store.last_seq("old") == 3


def test_a_session_another_process_owns_is_refused(store: EventStore) -> None:
    session = record_session(store, [Step(text="Hi.")], ["Hello"], "own")
    store.leases.acquire(session, "worker-7", 60)
    with pytest.raises(ErasureError, match=r"another process owns it \(worker-7\)"):
        forget(store, session)
    assert not any(isinstance(e.body, ContentErased) for e in store.read(session))


def test_commands_waiting_in_the_inbox_are_refused(store: EventStore) -> None:
    session = record_session(store, [Step(text="Hi.")], ["Hello"], "inbox")
    plan = TaskPlan("t9", "root", [InputText("and my address is 12 Elm Street")])
    store.inbox.put(session, Command(SubmitTask(plan)))
    with pytest.raises(ErasureError, match="1 commands wait in its inbox"):
        forget(store, session)


@pytest.mark.parametrize("policy", ["ttl:1h", "headers_only"])
def test_forget_works_under_other_storage_policies(stores: StoreFactory, policy: str) -> None:
    store = stores.open()
    kept = StoragePolicy.parse(policy)
    session = record_session(store, [Step(text="Hi there.")], ["Hello"], "pol", storage_policy=kept)
    forget(store, session, requested_by="desk")
    report = store.verify(session)
    assert report.ok, report.reason
    replies = [
        e.body.last_assistant_message
        for e in store.read(session)
        if type(e.body).__name__ == "TaskCompleted"
    ]
    assert replies and all(isinstance(r, Redacted) for r in replies)


def test_a_signed_session_is_erased_only_with_its_key_and_the_erasure_is_signed(
    store: EventStore, tmp_path: Path
) -> None:
    generate_key(tmp_path / "audit.key")
    generate_key(tmp_path / "other.key")
    signer = Signer.from_key_file(tmp_path / "audit.key")
    key = PublicKey.from_file(tmp_path / "audit.key.pub")
    session = record_session(store, [Step(text="Hi.")], ["Hello"], "sig", signer=signer)
    for wrong in (None, Signer.from_key_file(tmp_path / "other.key")):
        with pytest.raises(ErasureError, match="erase it with its key"):
            forget(store, session, signer=wrong)
    erasure = forget(store, session, signer=signer)
    assert erasure.signed
    report = store.verify(session, public_key=key, witness=signer.witness)
    assert report.ok, report.reason
    assert report.signatures is not None
    assert report.signatures.witness_seq == erasure.seq  # the erasure's head was witnessed


def test_a_fork_made_with_the_key_signs_its_copy(store: EventStore, tmp_path: Path) -> None:
    generate_key(tmp_path / "audit.key")
    signer = Signer.from_key_file(tmp_path / "audit.key")
    key = PublicKey.from_file(tmp_path / "audit.key.pub")
    session = record_session(store, [Step(text="Hi.")], ["Hello"], "fks", signer=signer)
    new = fork(store, session, 6, signer=signer)
    report = store.verify(new, public_key=key)
    assert report.ok, report.reason
    assert report.signatures is not None
    assert report.signatures.last_signed_seq == 6 and report.signatures.unsigned == 0
