"""A hostile user and a failing disk against the command line: flipped bytes, bad input.

One byte of a recorded session's SQLite file is changed in an event's data (a letter of a prompt,
the head of a record), its hash or the columns that find it (stream, seq, type), and every
reader runs on the changed copy: each must
exit 1 with one line, never print what the log cannot vouch for and never a traceback
(docs/event-log.md). Undecodable prompts end within the command's timeout with one line or a
completed task, never a traceback or a hang. ``bench/flips.py`` flips bytes all over the file.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from scripted import call

from plait.actors.model import ModelSettings
from plait.events import SqliteStore
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

SCRIPT = [
    Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count.")]),
    Step(text="There are two."),
    Step(text="The helper says two."),
    Step(text="Still two."),
]
"""Two tasks: the root hands work to a helper conversation, which answers; then a second."""

READERS: dict[str, list[str]] = {
    "log": ["log"],
    "history": ["history"],
    "audit": ["audit"],
    "replay": ["replay"],
    "verify": ["verify"],
    "show": ["show"],
    "exec": ["exec", "Go on.", "--session"],
}
"""Every reader of a session's log; the session id goes last."""


class Recorded:
    """A session recorded in a SQLite file, and where its rows' columns lie in the file."""

    def __init__(self, cwd: Path, session_id: str) -> None:
        self.cwd, self.session_id = cwd, session_id
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "OPENAI_"))}
        store = cwd / "plait.db"
        with sqlite3.connect(store) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows = conn.execute("SELECT stream, seq, type, data, hash FROM events").fetchall()
        conn.close()
        self.bytes = store.read_bytes()
        # the first model reply: its row's columns, each located in the file
        stream, _, kind, data, digest = next(r for r in rows if r[2] == "ModelResponded")
        self.data_at = self.bytes.index(data)
        self.hash_at = self.bytes.index(digest)
        self.type_at = self.bytes.rindex(kind.encode(), 0, self.data_at)
        self.stream_at = self.bytes.rindex(stream.encode(), 0, self.type_at)
        self.seq_at = self.stream_at + len(stream)  # the record's next column
        prompt = rows[[r[2] for r in rows].index("TaskEnqueued")][3]
        self.prompt_at = self.bytes.index(prompt) + prompt.index(b"How many?")

    def flipped(self, where: str) -> bytes:
        """The file with one byte changed at ``where``."""
        offset, mask = {
            "data text": (self.prompt_at, 0x20),  # "How many?" -> "how many?"
            "data head": (self.data_at, 0x01),  # the msgpack map's header
            "hash": (self.hash_at + 7, 0x01),
            "stream": (self.stream_at, 0x01),
            "seq": (self.seq_at, 0x01),
            "type": (self.type_at + 2, 0x20),
        }[where]
        data = bytearray(self.bytes)
        data[offset] ^= mask
        return bytes(data)

    def plait(self, *args: str | bytes, stdin: bytes = b"") -> tuple[int, str, str]:
        """Run ``plait ARGS`` here (its ``plait.toml`` names ``model``): exit code, out, err."""
        done = subprocess.run(
            [sys.executable, "-m", "plait", *args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            timeout=60,
        )
        return (
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    """A model server for ``plait exec --session`` (each answer "Fine.")."""
    with ScriptedModelServer([Step(text="Fine.")] * 50) as server:
        yield server


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Recorded:
    """``SCRIPT`` recorded, the session left open; a ``plait.toml`` naming ``model``."""
    cwd = tmp_path_factory.mktemp("adversarial")
    with ScriptedModelServer(SCRIPT) as server, SqliteStore(cwd / "plait.db") as store:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(store, model=settings, workdir=cwd) as runtime:
            session = runtime.start_session()
            session.run("How many?", timeout=30)
            session.run("Sure?", timeout=30)
    toml = f'[model]\nbase_url = "{model.base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
    (cwd / "plait.toml").write_text(toml)
    return Recorded(cwd, session.session_id)


def run_reader(
    recorded: Recorded, reader: str, data: bytes, tmp_path: Path
) -> tuple[int, str, str]:
    copy = tmp_path / "copy.db"
    copy.write_bytes(data)
    return recorded.plait(*READERS[reader], recorded.session_id, "--store", str(copy))


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_reads_the_unchanged_file(
    recorded: Recorded, reader: str, tmp_path: Path
) -> None:
    code, out, err = run_reader(recorded, reader, recorded.bytes, tmp_path)
    assert code == 0, out + err
    assert "Traceback" not in err


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("where", ["data text", "data head", "hash", "stream", "seq", "type"])
def test_a_flipped_byte_is_one_line_from_every_reader(
    recorded: Recorded, where: str, reader: str, tmp_path: Path
) -> None:
    code, out, err = run_reader(recorded, reader, recorded.flipped(where), tmp_path)
    assert "Traceback" not in err
    assert code == 1, f"exit {code}: what the log cannot vouch for was shown:\n{out}{err}"
    lines = err.strip().splitlines() or out.strip().splitlines()[-1:]
    assert len(lines) == 1, err
    assert recorded.session_id[:8] in lines[0] or "seq" in lines[0], lines[0]


BAD_PROMPTS: dict[str, tuple[list[str | bytes], bytes]] = {
    "a surrogate's bytes on stdin": (["-"], b"a \xed\xa0\x80 b"),
    "an invalid byte on stdin": (["-"], b"a \xff b"),
}


@pytest.mark.parametrize("case", [*BAD_PROMPTS, "an invalid byte in an argument"])
def test_an_undecodable_prompt_ends_with_one_line(
    recorded: Recorded, case: str, tmp_path: Path
) -> None:
    args, stdin = BAD_PROMPTS.get(case, ([b"a \xff b"], b""))
    store = str(tmp_path / "new.db")
    code, out, err = recorded.plait("exec", "--store", store, *args, stdin=stdin)
    assert "Traceback" not in err
    if code != 0:
        assert code == 1
        assert len(err.strip().splitlines()) == 1, err
    else:  # read with a defined replacement, and run
        assert "Fine." in out
