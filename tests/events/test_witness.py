"""The witness (docs/event-log.md#the-witness): each signed head, once durable, is appended to
a file outside the store, one JSON line each; it holds no byte of the key, a session whose
witness cannot be written goes on, and the latest head of a session is the line of the
highest seq. Through ``Runtime(signer=...)`` on each durable backend."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from scripted import call, record_session
from support import StoreFactory

from plait.actors.model import ModelSettings
from plait.errors import WitnessError
from plait.events import EventStore, HeadSigned
from plait.events.signing import Signer, generate_key
from plait.events.witness import Witness
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

SCRIPT = [
    Step(text="Looking.", tool_calls=[call("inventory", item="apples")]),
    Step(text="There are 3 apples."),
    Step(text="Still 3."),
]


def inventory(item: str) -> str:
    """Count an item in stock."""
    return f"3 {item}"


def record(store: EventStore, prefix: str, signer: Signer) -> str:
    """A closed session of ``SCRIPT``, written with ``signer``: two tasks and the close."""
    prompts = ["How many apples?", "Sure?"]
    return record_session(store, SCRIPT, prompts, prefix, tools=[inventory], signer=signer)


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "audit.key"
    generate_key(path)
    return path


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
        with Runtime(store, model=settings, signer=signer) as runtime:
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
