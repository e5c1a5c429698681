"""A store on a read-only mount (docs/event-log.md#stores): every command that only reads it
reads it, and writes nothing, not even SQLite's write-ahead log index; a command that writes
fails with one line naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from support import read_only_dir

if TYPE_CHECKING:
    from conftest import Cli

READERS = [
    ("sessions",),
    ("conversations", "ro-1"),
    ("history", "ro-1"),
    ("log", "ro-1"),
    ("show", "ro-1"),
    ("tree", "ro-1"),
    ("stats", "ro-1"),
    ("verify", "ro-1", "--full"),
    ("audit", "ro-1"),
    ("replay", "ro-1"),
]
"""Every command that only reads the store, on the recorded session."""


def test_every_reader_reads_a_store_on_a_read_only_mount(cli: Cli, tmp_path: Path) -> None:
    session = cli.record("ro")
    source = cli.store.parent
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in source.iterdir()}
    assert list(before) == ["plait.db"]  # closed: its write-ahead log is in the file
    with read_only_dir(source, tmp_path / "mounted") as ro:
        store = str(ro / "plait.db")
        for command in READERS:
            done = cli("--store", store, *command)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            assert session in done.stdout or command[0] != "sessions"
        forked = cli("--store", store, "fork", session, "--at", "3")
        assert forked.returncode == 1 and forked.stdout == ""
        assert forked.stderr.startswith(f"plait: {store}: cannot write the store: "), forked.stderr
        assert len(forked.stderr.splitlines()) == 1 and "Traceback" not in forked.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in source.iterdir()}
    assert after == before
