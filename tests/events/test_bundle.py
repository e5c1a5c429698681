"""Evidence bundles (docs/event-log.md#bundles): ``export_bundle`` writes a session's rows
byte for byte, its blobs and tombstones and the witness's lines of it to one file, and
``verify_bundle`` checks it as ``EventStore.verify`` checks the session, with no store; a
byte changed anywhere in the file makes it ``damaged``. On each durable backend."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import msgspec
import pytest
from scripted import record_inventory
from support import StoreFactory, cut_back, forge_tool_output

from plait._errors import BundleError
from plait.events import EventStore, HeadSigned, PublicKey, Signer, Witness, forget
from plait.events._blobs import blob_refs
from plait.events._bundle import FORMAT, Manifest, export_bundle, verify_bundle


def inventory(item: str) -> str:
    """Count an item in stock: a long answer, kept as a blob beside the events."""
    return f"3 {item}; " * 1000


def record(store: EventStore, prefix: str, signer: Signer) -> str:
    return record_inventory(store, prefix, signer, inventory)


def test_a_bundle_holds_the_rows_as_stored_and_verifies_with_no_store(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    record(store, "before", signer)  # another session first: the bundle's positions are sparse
    session = record(store, "kept", signer)
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    path = tmp_path / "kept.zip"
    made = export_bundle(store, session, path, witness=witness, public_key=public)
    stored = store.as_stored(session)
    last_seq, last_hash = stored.head
    assert stored.rows[0][0] > 1  # positions are the store's
    assert (made.format, made.session, made.events, made.last_seq) == (
        FORMAT,  # a row per append
        session,
        len(store.read(session)),
        last_seq,
    )
    assert made.last_hash == last_hash.hex() and made.fingerprints == [signer.fingerprint]
    named = {r.sha256 for e in store.read(session, resolve_blobs=False) for r in blob_refs(e.body)}
    assert (made.blobs, made.redacted, made.witness_lines, made.checked) == (
        len(named),
        [],
        3,
        "ok",
    )
    references = store.verify(session).blobs
    with zipfile.ZipFile(path) as bundle:
        assert json.loads(bundle.read("manifest.json")) == msgspec.to_builtins(made)
        held = msgspec.msgpack.decode(bundle.read("rows.msgpack"))
        assert [tuple(row) for row in held] == [tuple(row) for row in stored.rows]  # as stored
        blobs = [n for n in bundle.namelist() if n.startswith("blobs/")]
        assert {name.removeprefix("blobs/") for name in blobs} == named
        for name in blobs:
            assert bundle.read(name) == store.blobs.get(name.removeprefix("blobs/"))
        lines = bundle.read("witness.jsonl").decode().splitlines()
    assert lines == [
        line for line in Path(f"{key}.heads").read_text().splitlines() if session in line
    ]
    store.close()
    durable_stores.close()  # no store from here on
    report = verify_bundle(path, public)
    assert report.ok, report.reason
    assert (report.stream, report.events, report.blobs) == (session, made.events, references)
    assert report.signatures is not None and report.signatures.checked
    assert report.signatures.witness_seq == last_seq - 1
    assert report.signatures.witness == f"bundle {path}"
    unchecked = verify_bundle(path, None)
    assert unchecked.ok and unchecked.signatures is not None
    assert not unchecked.signatures.checked and unchecked.signatures.witness_seq is None


def test_a_bundle_is_never_written_over_a_file(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    path = tmp_path / "there.zip"
    path.write_bytes(b"someone's file")
    with pytest.raises(BundleError, match=rf"^{path} exists: not overwritten"):
        export_bundle(store, session, path)
    assert path.read_bytes() == b"someone's file"


def test_a_byte_flipped_anywhere_in_a_bundle_makes_it_damaged(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    """In a row, a blob, the manifest, a member's header or time, the zip's directory, its
    checksum: each is one ``BundleError`` naming the file, never another exception."""
    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    path = tmp_path / "kept.zip"
    export_bundle(store, session, path, witness=Witness(f"{key}.heads"))
    public = PublicKey.from_file(f"{key}.pub")
    good = path.read_bytes()
    flipped = tmp_path / "flipped.zip"
    for at in range(len(good)):
        data = bytearray(good)
        data[at] ^= 0x01
        flipped.write_bytes(data)
        with pytest.raises(BundleError, match=rf"^bundle {flipped}: damaged \("):
            verify_bundle(flipped, public)
    flipped.write_bytes(good[:-1])  # cut short
    with pytest.raises(BundleError, match=r": damaged \(no plait checksum at its end\)$"):
        verify_bundle(flipped, public)


def test_a_zip_whose_checksum_holds_but_whose_member_fails_its_crc_is_damaged(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    """Whoever re-seals an edited bundle gets past the checksum (it is no secret), not past
    zip's own CRC of a member."""
    from plait.events import _bundle as bundles

    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    path = tmp_path / "kept.zip"
    export_bundle(store, session, path)
    with zipfile.ZipFile(path) as original:
        info = original.getinfo("manifest.json")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data = bytearray(path.read_bytes()[: -bundles._COMMENT])
    data[-2:] = b"\0\0"  # the comment is gone: re-sealed below
    data[start + 3] ^= 0x01  # inside the manifest's compressed bytes
    buffer = io.BytesIO(bytes(data))
    bundles._seal(buffer)
    resealed = tmp_path / "resealed.zip"
    resealed.write_bytes(buffer.getvalue())
    with pytest.raises(BundleError, match=rf"^bundle {resealed}: damaged \(.+\)$"):
        verify_bundle(resealed, PublicKey.from_file(f"{key}.pub"))


def test_a_bundle_of_a_log_cut_back_fails_on_its_witness_lines_or_a_witness_given(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    heads = [e.seq for e in store.read(session) if isinstance(e.body, HeadSigned)]
    cut = cut_back(store, durable_stores.tamper, session, heads[0])
    witness, public = Witness(f"{key}.heads"), PublicKey.from_file(f"{key}.pub")
    carried = tmp_path / "carried.zip"
    export_bundle(store, session, carried, witness=witness)
    expected = (
        f"truncated: the witness holds a signed head at seq {heads[-1] - 1}, "
        f"the log ends at seq {cut}"
    )
    report = verify_bundle(carried, public)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, cut + 1, expected)
    bare = tmp_path / "bare.zip"  # exported without the witness: only the one given catches it
    export_bundle(store, session, bare)
    assert verify_bundle(bare, public).ok
    report = verify_bundle(bare, public, witness)
    assert (report.ok, report.reason) == (False, expected)
    assert report.signatures is not None
    assert report.signatures.witness == f"bundle {bare} and {witness.path}"


def test_a_bundle_of_a_forged_log_fails_its_signatures(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    seq = forge_tool_output(store, durable_stores.tamper, session, "300 apples")
    path = tmp_path / "forged.zip"
    export_bundle(store, session, path)
    head = next(
        e.seq for e in store.read(session) if isinstance(e.body, HeadSigned) and e.seq > seq
    )
    report = verify_bundle(path, PublicKey.from_file(f"{key}.pub"))
    assert (report.ok, report.first_bad_seq) == (False, head)
    assert report.reason.startswith(f"bad signature: seq {head}: the head it signs")
    assert verify_bundle(path, None).ok  # the chain alone, re-hashed, vouches for it


def test_a_bundle_of_an_erased_session_lists_its_tombstones_and_verifies(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    signer = Signer.from_key_file(key)
    session = record(store, "kept", signer)
    forget(store, session, requested_by="privacy desk", reason="request 1", signer=signer)
    path = tmp_path / "erased.zip"
    made = export_bundle(store, session, path)
    assert made.blobs == 0 and len(made.redacted) >= 1
    report = verify_bundle(path, PublicKey.from_file(f"{key}.pub"))
    assert report.ok, report.reason
    assert report.redacted == store.verify(session).redacted >= 1


def test_the_manifest_is_read_as_written(
    durable_stores: StoreFactory, key: Path, tmp_path: Path
) -> None:
    store = durable_stores.open()
    session = record(store, "kept", Signer.from_key_file(key))
    path = tmp_path / "kept.zip"
    made = export_bundle(store, session, path)
    with zipfile.ZipFile(path) as bundle:
        assert msgspec.json.decode(bundle.read("manifest.json"), type=Manifest) == made
