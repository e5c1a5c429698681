"""An insider rewrites signed sessions; verifying with the public key catches every forgery.

Issue #33: an audit an insider cannot rewrite (docs/event-log.md#signed-heads). Honest signed
sessions (function and MCP tool calls, a ``conv_create`` hand-off, forks, a session a crash cut
after its last signed head) are recorded once per store through the real runtime. Each forgery
of ``tests/forgeries.py`` is then made with raw SQL only (``tests/insider.py``: the msgpack
decoded, a field changed, the chain re-hashed consistently, positions kept dense, the head row
set), on SQLite and on PostgreSQL; the hash chain alone vouches for every one of them, and
verifying with the public key (and the witness of the latest signed heads) must fail, naming a
seq, while every untouched session still verifies. ``plait verify SESSION --public-key
KEY.pub`` says so in one line and exits 1. ``bench/adversarial.py`` counts the same over more
sessions.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from forgeries import FORGERIES, Forgery
from scripted import HttpServer
from signed_sessions import Lab, World, record_honest
from support import POSTGRES_URL

from plait.events import (
    ConversationOpened,
    SessionClosed,
    ToolCallStarted,
    Witness,
    export_bundle,
    verify_bundle,
)


def _param(forgery: Forgery) -> object:
    return pytest.param(forgery, id=forgery.name.replace(" ", "-"))


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    """The test MCP server over streamable HTTP, for the sessions that call its tools."""
    server = HttpServer()
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mcp_url: str
) -> Iterator[Lab]:
    """The honest sessions, recorded once per store; each test forges and undoes."""
    world = World.create(request.param, tmp_path_factory.mktemp(request.param), POSTGRES_URL)
    try:
        world = record_honest(world, mcp_url)
        with Lab(world) as lab:
            yield lab
    finally:
        world.drop()


def test_every_honest_session_verifies_with_the_key_and_the_witness(lab: Lab) -> None:
    """No false alarm: each kind of honest session verifies, the witness holding its last
    signed head; the crashed one with its unsigned last events, the forks with the heads they
    copied."""
    sessions = lab.world.sessions
    kinds = ["crashed", "fork", "fork-unresumed", "functions", "handoff", "mcp"]
    assert sorted(sessions) == [f"{kind}-1" for kind in kinds]
    witness = Witness(lab.world.witness)
    proofs = {}
    for name, session in sessions.items():
        report = lab.store.verify(session, public_key=lab.public_key, witness=witness)
        assert report.ok and report.signatures is not None, (name, report.reason)
        assert report.signatures.witness_seq == report.signatures.last_signed_seq, name
        proofs[name] = report.signatures
    logs = {name: lab.store.read(session) for name, session in sessions.items()}
    servers = {e.body.server for e in logs["mcp-1"] if isinstance(e.body, ToolCallStarted)}
    assert servers == {"t"}  # the MCP server's tools, not functions
    opened = [e for e in logs["handoff-1"] if isinstance(e.body, ConversationOpened)]
    assert len(opened) == 2  # the root and the helper conv_create made
    assert proofs["crashed-1"].signed == 2 and proofs["crashed-1"].unsigned > 0
    assert not any(isinstance(e.body, SessionClosed) for e in logs["crashed-1"])
    # A fork: the head it copied, its own made as it was forked, then (resumed) a task's
    # and the close's.
    for name, signed in (("fork-1", 4), ("fork-unresumed-1", 2)):
        forked = proofs[name]
        assert (forked.signed, forked.copied, forked.copied_from) == (
            signed,
            1,
            sessions["functions-1"],
        ), name


def test_the_insider_writes_an_untouched_log_back_byte_for_byte(lab: Lab) -> None:
    """The toolkit's own re-encoding changes nothing: what verify catches is the forgery."""
    before = lab.insider.save()
    try:
        for session in lab.world.sessions.values():
            lab.insider.rewrite(session, lab.insider.log(session))
        assert lab.insider.save() == before
    finally:
        lab.insider.restore(before)


@pytest.mark.parametrize("forgery", [_param(f) for f in FORGERIES])
def test_a_forgery_is_detected_and_no_untouched_session_is_flagged(
    lab: Lab, forgery: Forgery
) -> None:
    tried = 0
    for name, session in lab.world.sessions.items():
        # The untouched sessions are verified too, after the first forgery (it costs: the
        # bench does it after each).
        attempt = lab.attempt(forgery, session, others=not tried)
        if attempt is None:
            continue  # nothing it forges there (the crashed session's last event is unsigned)
        tried += 1
        assert attempt.outcome.chain_ok, f"{name}: not consistent: the chain alone fails"
        assert not attempt.outcome.ok, f"{name}: silent: {attempt.outcome.reason}"
        assert attempt.outcome.seq is not None, (name, attempt.outcome)
        if attempt.key_only is not None:  # the public key alone tells it
            assert not attempt.key_only.ok, f"{name}: silent without the witness"
        assert attempt.false_alarms == [], name
    assert tried > 0, "it applies to no session"


CLI_FORGERIES = [
    "edit a tool output",
    "re-sign with another key",
    "splice another session's tasks",
    "drop the last event",
    "replay an old witness line",
]
"""What the user sees is checked for these, as a real ``plait verify`` subprocess (on SQLite:
the store makes no difference to the command's words, and each run costs a second or more)."""

on_sqlite = pytest.mark.parametrize("lab", ["sqlite"], indirect=True)


def plait(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    """``plait --store STORE ARGS`` in a directory of no project, without plait's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, "-m", "plait", "--store", lab.world.url, *args],
        cwd=lab.world.where,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@on_sqlite
def test_plait_verify_with_the_key_says_ok_of_honest_sessions_crashed_or_not(lab: Lab) -> None:
    public = f"{lab.world.key}.pub"
    witness = rf"witness {re.escape(str(lab.world.witness))}: its last head, seq \d+, is the log's"
    closed = plait(lab, "verify", lab.world.sessions["functions-1"], "--public-key", public)
    assert closed.returncode == 0, closed.stdout + closed.stderr
    shown = rf"ok: .*; 3 signed heads by [0-9a-f]{{16}} checked, the last at seq \d+; {witness}\n"
    assert re.fullmatch(shown, closed.stdout), closed.stdout
    crashed = plait(lab, "verify", lab.world.sessions["crashed-1"], "--public-key", public)
    assert crashed.returncode == 0, crashed.stdout + crashed.stderr
    shown = rf"ok: .* checked, the last at seq \d+; \d+ events after it unsigned; {witness}\n"
    assert re.fullmatch(shown, crashed.stdout), crashed.stdout


@on_sqlite
@pytest.mark.parametrize("forgery", [_param(f) for f in FORGERIES if f.name in CLI_FORGERIES])
def test_plait_verify_of_a_forgery_exits_1_with_one_line_naming_a_seq(
    lab: Lab, forgery: Forgery
) -> None:
    session = lab.world.sessions["functions-1"]
    with lab.forged(forgery, session) as applied:
        assert applied
        done = plait(lab, "verify", session, "--public-key", f"{lab.world.key}.pub")
    assert (done.returncode, done.stderr) == (1, ""), done.stdout + done.stderr
    assert re.fullmatch(r"[a-z ]+: [^\n]*\bseq \d+\b[^\n]*\n", done.stdout), done.stdout


@on_sqlite
def test_every_honest_session_exported_as_a_bundle_verifies(lab: Lab, tmp_path: Path) -> None:
    witness = Witness(lab.world.witness)
    for name, session in lab.world.sessions.items():
        bundle = tmp_path / f"{name}.zip"
        export_bundle(lab.store, session, bundle, witness=witness)
        report = verify_bundle(bundle, lab.public_key)
        assert report.ok, (name, report.reason)


@on_sqlite
@pytest.mark.parametrize("forgery", [_param(f) for f in FORGERIES])
def test_a_forged_session_exported_as_a_bundle_fails_there_too(
    lab: Lab, forgery: Forgery, tmp_path: Path
) -> None:
    """An evidence bundle holds the forged rows byte for byte and the witness's lines: verified
    anywhere with the public key, it fails as the store does (docs/event-log.md#bundles)."""
    witness = Witness(lab.world.witness)
    for session in lab.world.sessions.values():
        with lab.forged(forgery, session) as applied:
            if not applied:
                continue
            bundle = tmp_path / "forged.zip"
            export_bundle(lab.store, session, bundle, witness=witness)
        report = verify_bundle(bundle, lab.public_key)
        assert not report.ok and report.first_bad_seq is not None, report.reason
        return
    raise AssertionError("it applies to no session")
