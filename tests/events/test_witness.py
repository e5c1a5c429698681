"""The witness (docs/event-log.md#the-witness): each signed head, once durable, is appended to
a file outside the store, one JSON line each; it holds no byte of the key, a session whose
witness cannot be written goes on, and the latest head of a session is the line of the
highest seq. Through ``RuntimeSettings(signer=...)`` on each durable backend."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import msgspec
import pytest
from scripted import record_inventory
from support import StoreFactory, cut_back, forge_tool_output

from plait._errors import WitnessError
from plait.actors import ModelSettings
from plait.events import (
    EventStore,
    HeadSigned,
    PublicKey,
    Signer,
    TaskCompleted,
    Witness,
    generate_key,
)
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

record = record_inventory


def test_each_signed_head_is_witnessed_beside_the_key_as_the_log_holds_it(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    heads = [e for e in store.read(session) if isinstance(e.body, HeadSigned)]
    witness = Path(f"{key}.heads")
    assert os.stat(witness).st_mode & 0o777 == 0o644
    lines = [json.loads(line) for line in witness.read_text().splitlines()]
    expected = []
    for head in heads:
        body = head.body
        assert isinstance(body, HeadSigned)
        expected.append(
            {
                "stream": session,
                "seq": body.seq,
                "head_hash": body.head_hash.hex(),
                "fingerprint": body.fingerprint,
                "signature": body.signature.hex(),
                "at": head.at.isoformat(),
            }
        )
    assert lines == expected and len(lines) == 3
    [latest] = Witness(witness).heads().values()
    assert (latest.stream, latest.seq, latest.line) == (session, heads[-1].seq - 1, 3)


def test_the_witness_holds_no_byte_of_the_key(durable_stores: StoreFactory, key: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    store = durable_stores.open()
    record(store, "wit", Signer.from_key_file(key))
    private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    raw = private.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    held = Path(f"{key}.heads").read_bytes()
    assert raw not in held and raw.hex().encode() not in held
    assert b"PRIVATE" not in held and key.read_bytes() not in held


def test_a_signer_given_a_witness_writes_there_and_sessions_share_it(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    """From Python: ``Signer(fingerprint, sign, witness=Witness(path))`` (a KMS's signer)."""
    from_file = Signer.from_key_file(key)
    elsewhere = tmp_path / "mounted" / "plait.heads"
    elsewhere.parent.mkdir()
    signer = Signer(from_file.fingerprint, from_file.sign, witness=Witness(elsewhere))
    store = durable_stores.open()
    first, second = record(store, "one", signer), record(store, "two", signer)
    assert not Path(f"{key}.heads").exists()
    heads = Witness(elsewhere).heads()
    assert set(heads) == {first, second}
    assert Witness(elsewhere).heads(first).keys() == {first}
    for session in (first, second):
        events = store.read(session)
        assert heads[session].seq == events[-1].seq - 1  # the close's head
        assert heads[session].head_hash == events[-2].hash


def test_the_latest_head_is_the_highest_seq_not_the_last_line(
    durable_stores: StoreFactory, key: Path
) -> None:
    """An old line appended again (by a restored backup, say) does not take the witness back."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    path = Path(f"{key}.heads")
    first = path.read_text().splitlines()[0]
    before = Witness(path).heads()[session]
    with path.open("a") as file:
        file.write(first + "\n")
    after = Witness(path).heads()[session]
    assert after == before and after.line == 3
    assert [line.line for line in Witness(path).lines(session)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "not a witness line: JSON is malformed"),
        ('{"stream": "s", "seq": 1}', "not a witness line: Object missing required field"),
        (
            '{"stream": "s", "seq": 1, "head_hash": "zz", "fingerprint": "f", '
            '"signature": "00", "at": "2026-01-02T03:04:05+00:00"}',
            "not a witness line: non-hexadecimal",
        ),
    ],
)
def test_a_line_that_is_not_a_witness_line_is_one_error_naming_file_and_line(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "audit.key.heads"
    good = (
        '{"stream":"s","seq":3,"head_hash":"00","fingerprint":"f","signature":"00",'
        '"at":"2026-01-02T03:04:05+00:00"}'
    )
    path.write_text(f"{good}\n{text}\n")
    with pytest.raises(WitnessError, match=rf"^witness {path} line 2: {why}"):
        Witness(path).heads()
    with pytest.raises(WitnessError, match=rf"^witness {tmp_path}/gone\.heads: No such file"):
        Witness(tmp_path / "gone.heads").heads()


def test_a_witness_that_cannot_be_written_warns_once_a_head_and_the_session_goes_on(
    durable_stores: StoreFactory, key: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its directory is not there (an unmounted disk): each head is one warning, the session
    runs and verifies; once it is back, the next head is written to it."""
    from_file = Signer.from_key_file(key)
    path = tmp_path / "unmounted" / "plait.heads"
    signer = Signer(from_file.fingerprint, from_file.sign, witness=Witness(path))
    store = durable_stores.open()
    with ScriptedModelServer([Step(text="one"), Step(text="two")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(store, RuntimeSettings(model=settings, signer=signer)) as runtime:
            session = runtime.start_session()
            with caplog.at_level(logging.WARNING, logger="plait"):
                assert session.run("first", timeout=30).last_assistant_message == "one"
            path.parent.mkdir()
            assert session.run("second", timeout=30).last_assistant_message == "two"
    events = store.read(session.session_id)
    heads = [e for e in events if isinstance(e.body, HeadSigned)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        f"session {session.session_id} seq {heads[0].seq}: signed head not witnessed: "
        f"witness {path}: No such file or directory"
    ]
    held = Witness(path).heads()[session.session_id]
    assert held.seq == heads[-1].seq - 1  # the second task's, then its close's if any
    assert store.verify(session.session_id).ok


# --- verify with the witness ------------------------------------------------------------------


def signed_heads(store: EventStore, session: str) -> list[int]:
    """The seqs of the session's ``HeadSigned`` events."""
    return [e.seq for e in store.read(session) if isinstance(e.body, HeadSigned)]


def test_verify_with_key_and_witness_checks_every_head_and_the_witnesss_last(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    session = record(store, "wit", signer)
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    last = store.last_seq(session)
    report = store.verify(session, public_key=public, witness=witness)
    assert report.ok and report.signatures is not None
    assert report.signatures.checked and report.signatures.signed == 3
    assert (report.signatures.witness_seq, report.signatures.witness) == (
        last - 1,
        str(witness.path),
    )
    plain = store.verify(session)  # no key: said who signed, nothing checked
    assert plain.ok and plain.signatures is not None and not plain.signatures.checked
    assert plain.signatures.fingerprints == [signer.fingerprint]
    assert plain.signatures.witness_seq is None
    keyed = store.verify(session, public_key=public)  # no witness: none checked
    assert keyed.ok and keyed.signatures is not None and keyed.signatures.witness_seq is None


def test_a_log_cut_back_to_an_earlier_signed_head_verifies_but_not_against_the_witness(
    durable_stores: StoreFactory, key: Path
) -> None:
    """The insider deletes the last task and the close and resets the stream's head: the
    chain and every signature left hold; the witness holds the later head."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    first_head, *_, last_head = signed_heads(store, session)
    cut = cut_back(store, durable_stores.tamper, session, first_head)
    assert store.verify(session).ok
    keyed = store.verify(session, public_key=public)
    assert keyed.ok, keyed.reason  # the signatures left all verify
    report = store.verify(session, public_key=public, witness=witness)
    assert not report.ok and report.first_bad_seq == cut + 1
    assert report.reason == (
        f"truncated: the witness holds a signed head at seq {last_head - 1}, "
        f"the log ends at seq {cut}"
    )
    assert report.signatures is not None and report.signatures.witness_seq == last_head - 1


def test_a_session_deleted_whole_is_caught_by_the_witness(
    durable_stores: StoreFactory, key: Path
) -> None:
    """Its rows and its head gone: PostgreSQL's positions, not a count, show no jump
    (docs/event-log.md#streams-seq-and-position); the witness still holds its head."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    for event in reversed(store.read(session)):
        durable_stores.tamper.delete(session, event.seq)
    durable_stores.tamper.delete_head(session)
    assert session not in [info.stream for info in store.streams()]
    report = store.verify(session, public_key=public, witness=witness)
    assert not report.ok and report.reason.startswith("truncated: the witness holds"), report


def test_a_log_cut_back_and_written_on_unsigned_is_caught_where_the_witnessed_head_was(
    durable_stores: StoreFactory, key: Path
) -> None:
    """Cut back, then appended to as the store appends (chained, head set): the log is as
    long as before, but where the witness's head was signed there is no signed head."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    first_head, *_, last_head = signed_heads(store, session)
    cut_back(store, durable_stores.tamper, session, first_head)
    events = store.read(session)
    filler = [TaskCompleted(last_assistant_message="nothing happened")]
    store.append(session, filler * (last_head - first_head), first_head)
    report = store.verify(session, public_key=public, witness=witness)
    assert not report.ok and report.first_bad_seq == last_head
    assert report.reason == (
        f"witness: seq {last_head}: the witness holds a signed head at seq {last_head - 1} "
        f"({witness.path} line 3) that the log does not: it is not a signed head"
    )
    assert len(store.read(session)) == len(events) + last_head - first_head


def test_a_witness_line_not_signed_by_the_key_is_reported_by_file_and_line(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    """Whoever can write the witness can add a line, not sign it: a later head made up to
    hide a truncation, or the witness of another key."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    path = Path(f"{key}.heads")
    public = PublicKey.from_file(f"{key}.pub")
    [*_, last] = path.read_text().splitlines()
    line = json.loads(last)
    made_up = {**line, "seq": line["seq"] + 10}
    path.write_text(path.read_text() + json.dumps(made_up) + "\n")
    report = store.verify(session, public_key=public, witness=Witness(path))
    assert not report.ok and report.first_bad_seq is None
    assert report.reason == (
        f"witness: {path} line 4 (seq {made_up['seq']}): its signature does not match what "
        "it signs (forged)"
    )
    other = tmp_path / "other.key"
    generate_key(other)
    events = store.read(session)
    by_other = Signer.from_key_file(other).head(session, 3, events[2].hash)
    line = {
        "stream": session,
        "seq": by_other.seq,
        "head_hash": by_other.head_hash.hex(),
        "fingerprint": by_other.fingerprint,
        "signature": by_other.signature.hex(),
        "at": events[2].at.isoformat(),
    }
    shared = tmp_path / "shared.heads"
    shared.write_text(json.dumps(line) + "\n")
    report = store.verify(session, public_key=public, witness=Witness(shared))
    assert not report.ok and report.reason == (
        f"witness: {shared} line 1 (seq 3): signed by key {by_other.fingerprint[:16]}, not by "
        f"the public key given ({public.fingerprint[:16]})"
    )


def test_a_session_rewritten_with_its_signed_heads_left_out_fails_with_a_key(
    durable_stores: StoreFactory, key: Path
) -> None:
    """Every ``HeadSigned`` dropped and the chain re-hashed from seq 1: the chain holds and no
    signature is left to fail; a key says it is unsigned, the witness where its head was."""
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    public, witness = PublicKey.from_file(f"{key}.pub"), Witness(f"{key}.heads")
    events = store.read(session, resolve_blobs=False)
    kept = [e for e in events if not isinstance(e.body, HeadSigned)]
    tamper = durable_stores.tamper
    renumbered = [msgspec.structs.replace(e, seq=seq) for seq, e in enumerate(kept, 1)]
    cut = len(kept)
    tamper.truncate(session, cut, tamper.rechain(session, renumbered, events[0].prev_hash))
    assert store.verify(session).ok
    unsigned = store.verify(session, public_key=public)
    assert not unsigned.ok and unsigned.first_bad_seq is None
    assert unsigned.reason == (
        "unsigned: no signed head (was the session written with [audit] signing_key?)"
    )
    held = witness.heads()[session].seq
    report = store.verify(session, public_key=public, witness=witness)
    assert not report.ok and report.first_bad_seq == cut + 1
    assert report.reason.startswith(f"truncated: the witness holds a signed head at seq {held}")


def test_a_rehashed_forgery_fails_on_its_signature_before_the_witness_is_asked(
    durable_stores: StoreFactory, key: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    seq = forge_tool_output(store, durable_stores.tamper, session, "300 apples")
    head = next(h for h in signed_heads(store, session) if h > seq)
    public, witness = PublicKey.from_file(f"{key}.pub"), Witness(f"{key}.heads")
    report = store.verify(session, public_key=public, witness=witness)
    assert not report.ok and report.first_bad_seq == head
    assert report.reason == (
        f"bad signature: seq {head}: the head it signs (seq {head - 1}) is not the log's: "
        "events up to it were changed"
    )
    assert report.signatures is not None and report.signatures.failure == "signature"


def test_a_witness_with_no_line_of_the_session_checks_nothing_and_says_so(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "wit", Signer.from_key_file(key))
    elsewhere = tmp_path / "other.heads"
    elsewhere.write_text("")
    report = store.verify(
        session, public_key=PublicKey.from_file(f"{key}.pub"), witness=Witness(elsewhere)
    )
    assert report.ok and report.signatures is not None
    assert (report.signatures.witness_seq, report.signatures.witness) == (None, str(elsewhere))
