"""Signed heads (docs/event-log.md#signed-heads): a session written with a signer records
``HeadSigned`` after each task's end and at its close; its signatures verify with the public
key, and an insider who rewrites the log and re-hashes the whole chain is caught by them, where
the hash chain alone says ok. On each durable backend, through ``RuntimeSettings(signer=...)``."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from scripted import call, crash, inventory, record_inventory, record_session
from support import StoreFactory, forge_tool_output

from plait import KeyFileError
from plait.actors import ModelSettings
from plait.events import (
    Event,
    HeadSigned,
    SessionClosed,
    SessionReopened,
    TaskCompleted,
    TaskStarted,
    ToolCallCompleted,
    TurnAborted,
    encode_event,
)
from plait.events._signing import (
    SIGN_EVERY,
    PublicKey,
    Signer,
    generate_key,
    verify_signatures,
)
from plait.replay import fork, replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step


def ends(events: list[Event]) -> list[int]:
    """The seqs of the events that end a task or close the session."""
    return [
        e.seq for e in events if isinstance(e.body, TaskCompleted | TurnAborted | SessionClosed)
    ]


record = record_inventory


def test_a_signed_session_has_a_signed_head_after_each_task_end_and_verifies(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    session = record(store, "sig", signer)
    events = store.read(session)
    heads = [e for e in events if isinstance(e.body, HeadSigned)]
    # Two tasks and the close, each followed by a head signed over the event before it.
    assert len(heads) == len(ends(events)) == 3
    for end in ends(events):
        assert isinstance(events[end].body, HeadSigned)  # events[end] is seq end + 1
    assert isinstance(events[-1].body, HeadSigned) and isinstance(events[-2].body, SessionClosed)
    for head in heads:
        assert isinstance(head.body, HeadSigned)
        assert head.body.seq == head.seq - 1
        assert head.body.head_hash == events[head.seq - 2].hash
        assert head.body.fingerprint == signer.fingerprint
    report = verify_signatures(events, PublicKey.from_file(f"{key}.pub"))
    assert report.ok and report.checked and report.signed == 3
    assert (report.last_signed_seq, report.unsigned) == (events[-1].seq - 1, 0)
    assert store.verify(session).ok


def test_a_chain_rehashed_by_an_insider_passes_the_chain_but_not_the_signatures(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "sig", Signer.from_key_file(key))
    seq = forge_tool_output(store, durable_stores.tamper, session, "300 apples")
    # The point: the hash chain alone is rebuilt consistently, and vouches for the forgery.
    assert store.verify(session).ok
    events = store.read(session)
    assert any(
        isinstance(e.body, ToolCallCompleted) and e.body.output == "300 apples" for e in events
    )
    report = verify_signatures(events, PublicKey.from_file(f"{key}.pub"))
    first_head = next(e.seq for e in events if isinstance(e.body, HeadSigned) and e.seq > seq)
    assert not report.ok and report.first_bad_seq == first_head
    assert report.reason == (
        f"the head it signs (seq {first_head - 1}) is not the log's: events up to it were changed"
    )


def test_another_keys_public_key_is_refused_and_without_a_key_nothing_is_checked(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    events = store.read(record(store, "sig", signer))
    other = generate_key(tmp_path / "other.key")
    report = verify_signatures(events, PublicKey.from_file(tmp_path / "other.key.pub"))
    first_head = next(e.seq for e in events if isinstance(e.body, HeadSigned))
    assert not report.ok and report.first_bad_seq == first_head
    assert report.reason == (
        f"signed by key {signer.fingerprint[:16]}, not by the public key given ({other[:16]})"
    )
    unchecked = verify_signatures(events, None)
    assert unchecked.ok and not unchecked.checked and unchecked.fingerprints == [signer.fingerprint]


def test_a_session_written_without_a_signer_records_no_signed_head(
    durable_stores: StoreFactory,
) -> None:
    store = durable_stores.open()
    events = store.read(record(store, "plain", None))
    assert not any(isinstance(e.body, HeadSigned) for e in events)
    report = verify_signatures(events, None)
    assert (report.signed, report.unsigned) == (0, len(events))


def test_a_signed_session_replays_without_a_difference(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "sig", Signer.from_key_file(key))
    result = replay(store, session)
    assert result.divergence is None and result.events == result.total == store.last_seq(session)


def test_a_signer_is_any_function_and_the_key_stays_out_of_the_log(
    durable_stores: StoreFactory, key: Path
) -> None:
    """A KMS signs without plait seeing the key: here, a function holding it."""
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    from_file = Signer.from_key_file(key)
    calls: list[bytes] = []

    def kms(message: bytes) -> bytes:
        calls.append(message)
        return from_file.sign(message)

    store = durable_stores.open()
    session = record(store, "kms", Signer(from_file.fingerprint, kms))
    events = store.read(session)
    assert len(calls) == 3
    assert verify_signatures(events, PublicKey.from_file(f"{key}.pub")).ok
    raw = private.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    assert not any(raw in encode_event(e) for e in events)
    assert "kms" not in repr(Signer(from_file.fingerprint, kms))


def test_a_key_file_that_is_not_a_key_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    with pytest.raises(KeyFileError, match=r"^signing key .*bad\.key: not an Ed25519 private"):
        Signer.from_key_file(bad)
    with pytest.raises(KeyFileError, match=r"^public key .*missing\.pub: No such file"):
        PublicKey.from_file(tmp_path / "missing.pub")


def test_a_signed_session_crashed_and_recovered_signs_the_crashed_end_and_replays(
    durable_stores: StoreFactory, key: Path
) -> None:
    """The crashed task's end, which the next process records, is signed too; the replay
    places the crash where it was, past the signed heads it has no key to make."""
    signer = Signer.from_key_file(key)
    ids = itertools.count(1)
    script = [
        Step(text="first"),
        Step(text="cut off " * 20, chunk_chars=2, chunk_delay=0.05),
        Step(text="after the crash"),
    ]
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")

        def runtime() -> Runtime:
            store = durable_stores.open()
            return Runtime(
                store,
                RuntimeSettings(model=settings, new_id=lambda: f"c-{next(ids)}", signer=signer),
            )

        first = runtime()
        session = first.start_session()
        session.run("one", timeout=30)
        with session.subscribe() as feed:
            session.submit("two")
            while isinstance(feed.get(timeout=30), Event):
                pass  # until the first streamed text: the task is running
        crash(first, session)
        with runtime() as second:
            resumed = second.resume(session.session_id)
            assert resumed.run("three", timeout=30).last_assistant_message == "after the crash"
            resumed.close()
    store = durable_stores.open()
    events = store.read(session.session_id)
    crashed = [e.seq for e in events if isinstance(e.body, TurnAborted)]
    assert len(crashed) == 1 and isinstance(events[crashed[0]].body, HeadSigned)
    heads = [e for e in events if isinstance(e.body, HeadSigned)]
    assert len(heads) == len(ends(events)) == 4  # one, the crashed two, three, the close
    assert verify_signatures(events, PublicKey.from_file(f"{key}.pub")).ok
    result = replay(store, session.session_id, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()


def test_a_closed_signed_session_is_closed_and_resuming_it_reopens_it(
    durable_stores: StoreFactory, key: Path
) -> None:
    """The close's signed head comes after ``SessionClosed``: the session is closed still."""
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    session = record(store, "sig", signer)
    closed = store.read(session)[-2]
    assert isinstance(closed.body, SessionClosed)
    with ScriptedModelServer([Step(text="back")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(store, RuntimeSettings(model=settings, signer=signer)) as runtime:
            assert runtime.recover() == []  # a closed session is not a crashed one
            handle = runtime.resume(session)
            assert handle.run("again?", timeout=30).last_assistant_message == "back"
            handle.close()
    events = store.read(session)
    assert events[closed.seq + 1].body == SessionReopened(closed_seq=closed.seq)
    assert verify_signatures(events, PublicKey.from_file(f"{key}.pub")).ok


def test_a_fork_of_a_signed_session_checks_its_own_heads_and_names_the_copied_ones(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    source = record(store, "src", signer)
    events = store.read(source)
    first_head = next(e.seq for e in events if isinstance(e.body, HeadSigned))
    forked = fork(store, source, first_head, new_session_id="forked")  # the first task, signed
    public = PublicKey.from_file(f"{key}.pub")
    copied = verify_signatures(store.read(forked), public)
    # They sign the source's chain: the fork's starts apart (its first event names the source).
    assert copied.ok and (copied.signed, copied.copied, copied.copied_from) == (1, 1, source)
    with ScriptedModelServer([Step(text="Forked on.")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(store, RuntimeSettings(model=settings, signer=signer)) as runtime:
            runtime.resume(forked).run("Go on.", timeout=30)
    own = verify_signatures(store.read(forked), public)
    # Its own: the task it ran and the close, checked against its own chain.
    assert own.ok and own.checked and (own.signed, own.copied) == (3, 1), own
    assert verify_signatures(store.read(source), public).ok  # the source's own heads still hold


def test_a_long_task_is_signed_within_every_sign_every_events_not_only_at_its_end(
    durable_stores: StoreFactory, key: Path
) -> None:
    """Thirty tool calls in one task: heads are signed while it runs, so an edit to its early
    calls is caught before the task ends, and no stretch of the log goes unsigned for long."""
    store = durable_stores.open()
    script = [
        Step(text=f"Counting {n}.", tool_calls=[call("inventory", item=f"crate {n}")])
        for n in range(30)
    ]
    session = record_session(
        store,
        [*script, Step(text="All counted.")],
        ["Count every crate."],
        "long",
        tools=[inventory],
        signer=Signer.from_key_file(key),
    )
    events = store.read(session)
    heads = [e.seq for e in events if isinstance(e.body, HeadSigned)]
    [started] = [e.seq for e in events if isinstance(e.body, TaskStarted)]
    [completed] = [e.seq for e in events if isinstance(e.body, TaskCompleted)]
    assert completed - started > 2 * SIGN_EVERY  # the task is long enough to be signed midway
    midway = [seq for seq in heads if started < seq < completed]
    assert len(midway) >= 2, heads
    # The largest group this task records is a turn's response: the model's answer, its
    # tokens, the call requested and started (4 events); a head follows the group that
    # reaches SIGN_EVERY events unsigned.
    for before, head in itertools.pairwise([0, *heads]):
        assert head - before - 1 < SIGN_EVERY + 4, heads
    assert heads[-1] == events[-1].seq  # the close's
    report = verify_signatures(events, PublicKey.from_file(f"{key}.pub"))
    assert report.ok and report.signed == len(heads)
    result = replay(store, session)
    assert result.ok, result.divergence and result.divergence.message()
