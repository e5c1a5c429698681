"""Signed heads at the command line (docs/event-log.md#signed-heads): ``plait keygen``, a
session ``plait exec`` writes with ``[audit] signing_key`` or ``PLAIT_SIGNING_KEY``, and
``plait verify --public-key``, which catches a log an insider rewrote and re-hashed, where the
hash chain alone says ok. Real subprocesses, a real model server, each durable store."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING

import pytest
from scripted import call, record_inventory, record_session
from support import StoreFactory, cut_back, forge_tool_output

from plait.events import HeadSigned, Signer
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


def keygen(cli: Cli, name: str) -> str:
    """Make a key pair ``NAME`` and ``NAME.pub`` in the working directory; its fingerprint
    as shown."""
    done = cli("keygen", "--out", name)
    assert done.returncode == 0, done.stderr
    shown = re.fullmatch(
        rf"wrote {name} \(private, mode 600\) and {name}\.pub; fingerprint ([0-9a-f]{{16}})\n",
        done.stdout,
    )
    assert shown is not None, done.stdout
    return shown[1]


def exec_signed(cli: Cli, server: ScriptedModelServer) -> tuple[str, str]:
    """``plait exec`` one task with a new ``audit.key`` in ``plait.toml``: the key's
    fingerprint as shown, and the session."""
    fingerprint = keygen(cli, "audit.key")
    cli.configure(server.base_url, '[audit]\nsigning_key = "audit.key"\n')
    server.push(Step(text="Two."))
    done = cli("exec", "How many?")
    assert done.returncode == 0, done.stderr
    return fingerprint, session_of(done.stderr)


def session_of(stderr: str) -> str:
    found = re.search(r"session ([0-9a-f-]{36})", stderr)
    assert found is not None, stderr
    return found[1]


def test_keygen_writes_a_private_key_only_its_owner_reads_and_will_not_overwrite_it(
    cli: Cli,
) -> None:
    fingerprint = keygen(cli, "audit.key")
    private, public = cli.cwd / "audit.key", cli.cwd / "audit.key.pub"
    assert os.stat(private).st_mode & 0o777 == 0o600
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert Signer.from_key_file(private).fingerprint.startswith(fingerprint)
    before = private.read_bytes()
    again = cli("keygen", "--out", "audit.key")
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == "plait: audit.key exists: not overwritten (choose another --out)\n"
    assert private.read_bytes() == before


def test_help_does_not_load_the_cryptography_package(cli: Cli) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "plait", "--help"],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "usage: plait" in done.stdout
    assert "cryptography" not in done.stderr
    # The parser imports no command's code; keygen's and verify's module, when it runs,
    # imports cryptography only where a key is made or read.
    traced = [sys.executable, "-X", "importtime", "-c", "import plait.cli._keys"]
    done = subprocess.run(traced, env=cli.env, capture_output=True, text=True, timeout=60)
    assert "plait.cli._keys" in done.stderr and "cryptography" not in done.stderr


@pytest.mark.parametrize("where", ["plait.toml", "PLAIT_SIGNING_KEY"])
def test_exec_with_a_signing_key_writes_a_session_that_verifies_and_replays(
    cli: Cli, server: ScriptedModelServer, where: str
) -> None:
    fingerprint = keygen(cli, "audit.key")
    extra = '[audit]\nsigning_key = "audit.key"\n' if where == "plait.toml" else ""
    cli.configure(server.base_url, extra)
    env = {"PLAIT_SIGNING_KEY": "audit.key"} if where == "PLAIT_SIGNING_KEY" else {}
    server.push(Step(text="Two."))
    done = cli("exec", "How many?", env=env)
    assert done.returncode == 0, done.stderr
    session = session_of(done.stderr)
    log = [json.loads(line) for line in cli("log", session, "--json").stdout.splitlines()]
    signed = [e["seq"] for e in log if e["body"]["type"] == "HeadSigned"]
    ends = [e["seq"] for e in log if e["body"]["type"] in ("TaskCompleted", "SessionClosed")]
    assert signed == [seq + 1 for seq in ends] and signed
    assert "audit.key" not in json.dumps(log) and "PRIVATE" not in json.dumps(log)

    checked = cli("verify", session, "--public-key", "audit.key.pub")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    total = len(log)
    assert checked.stdout.startswith(f"ok: {total} events, ")
    assert checked.stdout.endswith(
        f"; {len(signed)} signed heads by {fingerprint} checked, the last at seq {total - 1}; "
        f"witness audit.key.heads: its last head, seq {total - 1}, is the log's\n"
    )
    unchecked = cli("verify", session)
    assert unchecked.returncode == 0
    assert unchecked.stdout.endswith(f"; signed by {fingerprint}, unchecked (give --public-key)\n")
    cli.verified_and_replayed(session)


def test_verify_with_the_key_finds_a_rehashed_forgery_that_the_chain_does_not(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    keygen(cli, "audit.key")
    keygen(cli, "other.key")
    store = durable_stores.open()
    script = [
        Step(text="Looking.", tool_calls=[call("inventory", item="apples")]),
        Step(text="There are 3 apples."),
    ]

    def inventory(item: str) -> str:
        """Count an item in stock."""
        return f"3 {item}"

    signer = Signer.from_key_file(cli.cwd / "audit.key")
    session = record_session(store, script, ["How many?"], "sig", tools=[inventory], signer=signer)
    store.close()
    where = ("--store", durable_stores.url)
    assert cli(*where, "verify", session, "--public-key", "audit.key.pub").returncode == 0
    other = cli(*where, "verify", session, "--public-key", "other.key.pub")
    first_head = next(
        e.seq for e in durable_stores.open().read(session) if isinstance(e.body, HeadSigned)
    )
    assert other.returncode == 1
    assert other.stdout.startswith(f"bad signature: seq {first_head}: signed by key ")

    forged_seq = forge_tool_output(
        durable_stores.open(), durable_stores.tamper, session, "300 apples"
    )
    plain = cli(*where, "verify", session)
    # The point: re-hashed consistently, the chain vouches for the forged output...
    assert plain.returncode == 0 and plain.stdout.startswith("ok: "), plain.stdout
    assert "300 apples" in cli(*where, "log", session, "--json").stdout
    # ... and only the signature over a later head, which an insider cannot make, finds it.
    head = next(
        e.seq
        for e in durable_stores.open().read(session)
        if isinstance(e.body, HeadSigned) and e.seq > forged_seq
    )
    checked = cli(*where, "verify", session, "--public-key", "audit.key.pub")
    assert (checked.returncode, checked.stdout) == (
        1,
        f"bad signature: seq {head}: the head it signs (seq {head - 1}) is not the log's: "
        "events up to it were changed\n",
    )


def test_an_unsigned_session_verifies_as_before_and_is_said_unsigned_to_a_key(
    recorded: Cli, cli: Cli
) -> None:
    keygen(cli, "audit.key")
    plain = recorded("verify", "rec-1")
    assert plain.returncode == 0 and re.fullmatch(
        r"ok: \d+ events, \d+ blobs \(0 redacted\)\n", plain.stdout
    )
    keyed = recorded("verify", "rec-1", "--public-key", str(cli.cwd / "audit.key.pub"))
    assert (keyed.returncode, keyed.stdout) == (
        1,
        "unsigned: no signed head (was the session written with [audit] signing_key?)\n",
    )


def test_a_closed_signed_session_with_a_helper_says_closed_verifies_and_replays(cli: Cli) -> None:
    """A task handed to a helper ends (``TurnAborted``, replaced) and is signed; the close's
    signed head comes after ``SessionClosed``, and the session is closed all the same."""
    keygen(cli, "audit.key")
    session = cli.record("sig", signer=Signer.from_key_file(cli.cwd / "audit.key"))
    log = [json.loads(line) for line in cli("log", session, "--json").stdout.splitlines()]
    kinds = [e["body"]["type"] for e in log]
    assert "TurnAborted" in kinds and kinds[-2:] == ["SessionClosed", "HeadSigned"]
    ends = [i for i, kind in enumerate(kinds) if kind in ("TaskCompleted", "TurnAborted")]
    # Each after its task's end's group (the plans that replace a task are in it): before
    # the next task starts.
    signed = [i for i, kind in enumerate(kinds) if kind == "HeadSigned"]
    assert len(signed) == len(ends) + 1  # and the close's
    for end, head in zip(ends, signed, strict=False):
        assert end < head and "TaskStarted" not in kinds[end:head]
    assert json.loads(cli("show", session, "--json").stdout)["state"] == "closed"
    assert cli("tree", session).stdout.splitlines()[0].endswith(" closed")
    checked = cli("verify", session, "--public-key", "audit.key.pub")
    assert checked.returncode == 0 and "signed heads by" in checked.stdout, checked.stdout
    cli.verified_and_replayed(session)


# --- the witness ------------------------------------------------------------------------------


def test_verify_checks_the_witness_beside_the_public_key_or_the_one_named(
    cli: Cli, server: ScriptedModelServer
) -> None:
    fingerprint, session = exec_signed(cli, server)
    lines = (cli.cwd / "audit.key.heads").read_text().splitlines()
    last = json.loads(lines[-1])
    assert [json.loads(line)["stream"] for line in lines] == [session]  # the task's end
    signed = f"1 signed heads by {fingerprint} checked, the last at seq {last['seq']}"
    beside = cli("verify", session, "--public-key", "audit.key.pub")
    assert (beside.returncode, beside.stderr) == (0, "")
    assert beside.stdout.endswith(
        f"; {signed}; witness audit.key.heads: its last head, seq {last['seq']}, is the log's\n"
    )
    (cli.cwd / "copy.heads").write_text("\n".join(lines) + "\n")
    named = cli("verify", session, "--public-key", "audit.key.pub", "--witness", "copy.heads")
    assert named.returncode == 0 and named.stdout.endswith(
        f"; witness copy.heads: its last head, seq {last['seq']}, is the log's\n"
    )
    (cli.cwd / "keys").mkdir()
    (cli.cwd / "keys" / "audit.key.pub").write_bytes((cli.cwd / "audit.key.pub").read_bytes())
    alone = cli("verify", session, "--public-key", "keys/audit.key.pub")
    assert alone.returncode == 0 and alone.stdout.endswith(
        f"; {signed}; no witness at keys/audit.key.heads: truncation to an earlier signed head "
        "is not checked\n"
    )
    missing = cli("verify", session, "--public-key", "audit.key.pub", "--witness", "gone.heads")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "plait: witness gone.heads: no such file\n"
    keyless = cli("verify", session, "--witness", "audit.key.heads")
    assert (keyless.returncode, keyless.stdout) == (2, "")
    assert keyless.stderr == (
        "plait: --witness needs --public-key: the witness's lines are checked with it\n"
    )


def cut_back_signed(cli: Cli, durable_stores: StoreFactory) -> tuple[str, int, list[int]]:
    """A signed session (``audit.key``), cut back by an insider to its first signed head:
    the session, the seq it now ends at, and the seqs of its signed heads before the cut."""
    keygen(cli, "audit.key")
    session = signed_session(cli, durable_stores, "cut")
    store = durable_stores.open()
    heads = [e.seq for e in store.read(session) if isinstance(e.body, HeadSigned)]
    return session, cut_back(store, durable_stores.tamper, session, heads[0]), heads


def signed_session(cli: Cli, durable_stores: StoreFactory, prefix: str) -> str:
    """A closed session of two tasks in ``durable_stores``, signed with ``audit.key`` of the
    working directory (its witness beside it)."""
    store = durable_stores.open()
    session = record_inventory(store, prefix, Signer.from_key_file(cli.cwd / "audit.key"))
    store.close()
    return session


def test_a_log_cut_back_to_an_earlier_signed_head_is_caught_only_by_the_witness(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    """The insider deletes the second task and the close, and resets the stream's head: the
    chain and every signature left verify; the witness holds the close's head."""
    session, cut, heads = cut_back_signed(cli, durable_stores)
    where = ("--store", durable_stores.url)
    (cli.cwd / "keys").mkdir()  # the public key alone, as a verifier without the witness has it
    (cli.cwd / "keys" / "audit.key.pub").write_bytes((cli.cwd / "audit.key.pub").read_bytes())
    unwitnessed = cli(*where, "verify", session, "--public-key", "keys/audit.key.pub")
    assert unwitnessed.returncode == 0, unwitnessed.stdout
    assert "1 signed heads by " in unwitnessed.stdout and "no witness at" in unwitnessed.stdout
    caught = cli(*where, "verify", session, "--public-key", "audit.key.pub")
    assert (caught.returncode, caught.stderr) == (1, "")
    assert caught.stdout == (
        f"truncated: the witness holds a signed head at seq {heads[-1] - 1}, "
        f"the log ends at seq {cut}\n"
    )
    as_json = json.loads(
        cli(*where, "verify", session, "--public-key", "audit.key.pub", "--json").stdout
    )
    assert (as_json["ok"], as_json["first_bad_seq"]) == (False, cut + 1)
    assert as_json["signatures"]["witness_seq"] == heads[-1] - 1


def test_a_log_spliced_from_another_session_signed_by_the_same_key_fails_its_signatures(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    """Another session's events, signed by the same key, put in this one's place (re-hashed,
    the head set): each signed message names its session, so the first head fails."""
    keygen(cli, "audit.key")
    session = signed_session(cli, durable_stores, "kept")
    other = signed_session(cli, durable_stores, "other")
    store = durable_stores.open()
    theirs = store.read(other, resolve_blobs=False)
    assert len(theirs) == store.last_seq(session)
    tamper = durable_stores.tamper
    tamper.set_head_hash(session, tamper.rechain(session, theirs, theirs[0].prev_hash))
    where = ("--store", durable_stores.url)
    assert cli(*where, "verify", session).returncode == 0  # the chain alone vouches for it
    first_head = next(e.seq for e in theirs if isinstance(e.body, HeadSigned))
    checked = cli(*where, "verify", session, "--public-key", "audit.key.pub")
    assert (checked.returncode, checked.stdout) == (
        1,
        f"bad signature: seq {first_head}: the signature does not match what it signs "
        "(forged or re-signed)\n",
    )


# --- evidence bundles -------------------------------------------------------------------------


def test_export_writes_one_file_that_verifies_elsewhere_with_no_store_and_no_config(
    cli: Cli, server: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fingerprint, session = exec_signed(cli, server)
    log = [json.loads(line) for line in cli("log", session, "--json").stdout.splitlines()]
    exported = cli("export", session[:8], "-o", "evidence.zip")
    assert (exported.returncode, exported.stderr) == (0, "")
    assert re.fullmatch(
        rf"wrote evidence\.zip: session {session}, {len(log)} events, \d+ blobs, 0 redacted, "
        r"1 witness line\n",
        exported.stdout,
    ), exported.stdout
    again = cli("export", session[:8], "-o", "evidence.zip")
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == "plait: evidence.zip exists: not overwritten (choose another file)\n"

    elsewhere = cli.at(tmp_path_factory.mktemp("auditor"))  # no plait.toml, no store
    bundle = str(cli.cwd / "evidence.zip")
    (elsewhere.cwd / "audit.key.pub").write_bytes((cli.cwd / "audit.key.pub").read_bytes())
    checked = elsewhere("verify", "--bundle", bundle, "--public-key", "audit.key.pub")
    assert (checked.returncode, checked.stderr) == (0, "")
    last = len(log) - 1
    assert checked.stdout.startswith(f"ok: bundle {bundle}: session {session}, {len(log)} events")
    assert checked.stdout.endswith(
        f"; 1 signed heads by {fingerprint} checked, the last at seq {last}; "
        f"witness bundle {bundle}: its last head, seq {last}, is the log's\n"
    )
    assert not (elsewhere.cwd / ".plait").exists()

    data = bytearray((cli.cwd / "evidence.zip").read_bytes())
    data[len(data) // 2] ^= 0x01
    (elsewhere.cwd / "flipped.zip").write_bytes(data)
    flipped = elsewhere("verify", "--bundle", "flipped.zip", "--public-key", "audit.key.pub")
    assert (flipped.returncode, flipped.stderr) == (1, "")
    assert flipped.stdout == (
        "bundle flipped.zip: damaged (its checksum does not match its bytes: a byte changed)\n"
    )
    missing = elsewhere("verify", "--bundle", "gone.zip", "--public-key", "audit.key.pub")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "plait: bundle gone.zip: no such file\n"
    both = cli("verify", session, "--bundle", bundle)
    assert (both.returncode, both.stderr) == (
        2,
        "plait: plait verify takes a SESSION or --bundle FILE: one of them\n",
    )


def test_a_bundle_of_a_log_cut_back_fails_where_the_auditor_checks_it(
    cli: Cli, durable_stores: StoreFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The insider cuts the log back, then exports it: the witness's lines the bundle carries
    name the head that is gone."""
    session, cut, heads = cut_back_signed(cli, durable_stores)
    where = ("--store", durable_stores.url)
    cli.configure("http://127.0.0.1:9", '[audit]\nsigning_key = "audit.key"\n')
    assert cli(*where, "export", session, "-o", "cut.zip").returncode == 0
    elsewhere = cli.at(tmp_path_factory.mktemp("auditor"))
    (elsewhere.cwd / "audit.key.pub").write_bytes((cli.cwd / "audit.key.pub").read_bytes())
    checked = elsewhere(
        "verify", "--bundle", str(cli.cwd / "cut.zip"), "--public-key", "audit.key.pub"
    )
    assert (checked.returncode, checked.stdout) == (
        1,
        f"truncated: the witness holds a signed head at seq {heads[-1] - 1}, "
        f"the log ends at seq {cut}\n",
    )
