"""``plait forget`` (docs/storage.md#erasure): what a session said and what its tools were given
and returned leaves every byte of the store's files, while ``verify`` with the public key
still passes and ``audit`` still lists every call. Real subprocesses, a real model server,
the real SQLite file and the real PostgreSQL server's files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scripted import call, record_session
from support import POSTGRES_URL, StoreFactory, kept_forms

from plait.events import Signer
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

MARKER = "Zebra-Quartz-4417"
"""What the user said and the tools were given and returned: it must leave every byte."""


def store_bytes(stores: StoreFactory) -> bytes:
    """Every byte of the store's files as they are on disk now."""
    if stores.backend == "sqlite":
        files = sorted(stores.path.parent.glob(stores.path.name + "*"))
        return b"".join(path.read_bytes() for path in files)
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the shared buffers, written to the tables' files
        (home,) = conn.execute("SHOW data_directory").fetchone() or ("",)
        rows = conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "UNION SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.reltoastrelid != 0",
            (stores.schema, stores.schema),
        ).fetchall()
    files = [f for (path,) in rows if path for f in Path(home).glob(path + "*")]
    assert files, f"no files found for schema {stores.schema}"
    return b"".join(path.read_bytes() for path in files)


def audit(cli: Cli, where: tuple[str, str], session: str) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in cli(*where, "audit", session, "--json").stdout.splitlines()
    ]


def test_forget_erases_every_byte_and_keeps_the_proof(
    cli: Cli, server: ScriptedModelServer, durable_stores: StoreFactory
) -> None:
    assert cli("keygen", "--out", "audit.key").returncode == 0
    cli.configure(server.base_url, '[audit]\nsigning_key = "audit.key"\n')
    script = [
        Step(text=f"Looking {MARKER} up.", tool_calls=[call("lookup", person=MARKER)]),
        Step(text=f"{MARKER} lives at 12 Elm Street."),
    ]

    def lookup(person: str) -> str:
        """Find where a person lives."""
        return f"{person}: 12 Elm Street"

    store = durable_stores.open()
    signer = Signer.from_key_file(cli.cwd / "audit.key")
    session = record_session(
        store, script, [f"Where does {MARKER} live?"], "gdpr", tools=[lookup], signer=signer
    )
    store.close()
    where = ("--store", durable_stores.url)
    before = [
        json.loads(line) for line in cli(*where, "audit", session, "--json").stdout.splitlines()
    ]
    assert [(c["tool"], c["outcome"]) for c in before] == [("lookup", "ok")]
    forms = [MARKER.encode()]
    if durable_stores.backend == "sqlite":  # kept compressed in its rows (layout 4)
        forms = kept_forms(durable_stores.path, MARKER.encode())
    assert any(form in store_bytes(durable_stores) for form in forms)  # so the test can fail
    traced = cli(*where, "trace", session, "--json", "--content")
    assert traced.returncode == 0 and MARKER in traced.stdout, traced.stderr

    done = cli(*where, "forget", session, "--yes", "--by", "privacy desk", "--reason", "req 1142")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"erased session {session[:8]}: \d+ blobs \(\d+ bytes\) of \d+ events; "
        r"recorded at seq \d+; the head after it signed\n",
        done.stdout,
    ), done.stdout
    assert not any(form in store_bytes(durable_stores) for form in forms)
    if durable_stores.backend == "sqlite":
        assert kept_forms(durable_stores.path, MARKER.encode()) == [MARKER.encode()]

    checked = cli(*where, "verify", session, "--public-key", "audit.key.pub")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("ok: ") and "signed heads" in checked.stdout
    after = [
        json.loads(line) for line in cli(*where, "audit", session, "--json").stdout.splitlines()
    ]
    assert [(c["tool"], c["outcome"], c["output_size"]) for c in after] == [
        (c["tool"], c["outcome"], c["output_size"]) for c in before
    ]
    arguments = after[0]["arguments"]
    assert arguments["erased"] is True and arguments["size"] == len(json.dumps({"person": MARKER}))
    assert len(arguments["sha256"]) == 64
    traced = cli(*where, "trace", session, "--json", "--content")
    assert traced.returncode == 0, traced.stderr
    assert MARKER not in traced.stdout and '"execute_tool lookup"' in traced.stdout
    history = cli(*where, "history", session)
    assert history.returncode == 0 and "[erased]" in history.stdout
    assert MARKER not in history.stdout
    log = cli(*where, "log", session)
    assert "ContentErased" in log.stdout and '"requested_by":"privacy desk"' in log.stdout
    assert MARKER not in log.stdout
    replayed = cli(*where, "replay", session)
    assert replayed.returncode == 1 and "difference" not in replayed.stdout + replayed.stderr
    assert "content was erased on request at seq" in replayed.stderr
    assert "by privacy desk" in replayed.stderr and "(req 1142)" in replayed.stderr

    erased_at = int(re.findall(r"recorded at seq (\d+)", done.stdout)[0])
    again = cli(*where, "forget", session, "--yes")
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == (
        f"session {session[:8]}: its content was erased already (at seq {erased_at}); "
        "the store's files were scrubbed again\n"
    )


def test_forget_asks_first_and_erases_nothing_unconfirmed(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    store = durable_stores.open()
    session = record_session(store, [Step(text=f"Hello {MARKER}.")], ["Hi."], "ask")
    store.close()
    done = cli("--store", durable_stores.url, "forget", session)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "plait: nothing erased (erasing is for good: confirm, or pass --yes)\n"
    history = cli("--store", durable_stores.url, "history", session)
    assert f"Hello {MARKER}." in history.stdout
