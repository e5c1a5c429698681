"""A hostile user and a failing disk against the command line: flipped bytes, bad input.

One byte of a recorded session's SQLite file is changed in a prompt (a letter of it, in its
blob), in an event's data (the head of a record), its hash or the columns that find it (stream,
seq, type), and every reader runs on the changed copy: each must
exit 1 with one line, never print what the log cannot vouch for and never a traceback
(docs/event-log.md). Undecodable prompts end within the command's timeout with one line or a
completed task, never a traceback or a hang. ``bench/flips.py`` flips bytes all over the file.

Signals as operators send them (docs/processes.md#stopping): two at once, as ``timeout -s INT``
sends them, to ``plait exec`` mid-reply; one while a command starts, before its first lease. Each
ends with the clean stop or the immediate exit, one line, never a hang, no lease left live by a
clean stop. (A drain of many sessions: tests/cli/test_stopping.py.)
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scripted import call
from support import kept_forms

from plait.actors import ModelSettings
from plait.events import GENESIS_HASH, Event, ModelResponded, SqliteStore
from plait.events import _packing as packing
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli, Running

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
            rows = conn.execute(
                "SELECT n.name, a.seq, a.count, a.hash, a.data "
                "FROM appends AS a JOIN names AS n ON n.key = a.stream ORDER BY n.name, a.seq"
            ).fetchall()
        conn.close()
        # A row keeps no prev_hash: its first event follows the row before's last.
        prevs = [GENESIS_HASH, *(row[3] for row in rows[:-1])]
        self.bytes = store.read_bytes()
        # The row of the append that holds the first model reply, each column in the file
        # (one session here: its rows in seq order).
        stream, seq, count, digest, data = next(
            row
            for row, prev in zip(rows, prevs, strict=True)
            if any(isinstance(e.body, ModelResponded) for e in _events(*row, prev))
        )
        # The row's values: stream (its key), seq, count, prev_hash (NULL: no bytes), hash,
        # data, content.
        at = self.bytes.index(digest + data)
        assert 1 < seq < 128 and 1 < count < 128  # one byte each
        self.seq_at = at - 2
        self.count_at = at - 1
        self.hash_at = at
        self.data_at = self.hash_at + len(digest)
        # A row holds its stream's key; the id's text is in ``names`` (docs/event-log.md#stores),
        # a record of a key and one text column.
        self.stream_at = self.bytes.index(_names_record(stream))
        # A prompt is kept apart from its event (docs/storage.md#erasure): in the ``content``
        # of its append's row.
        (content,) = kept_forms(store, b"How many?")
        self.prompt_at = self.bytes.index(content) + len(content) // 2

    def flipped(self, where: str) -> bytes:
        """The file with one byte changed at ``where``."""
        offset, mask = {
            "data text": (self.prompt_at, 0x20),  # in the prompt's content
            "data head": (self.data_at, 0x01),  # its zstd frame's magic number
            "hash": (self.hash_at + 7, 0x01),
            "stream": (self.stream_at + 3, 0x01),
            "seq": (self.seq_at, 0x01),
            "count": (self.count_at, 0x01),
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


def _events(
    stream: str, seq: int, count: int, digest: bytes, data: bytes, prev: bytes
) -> list[Event]:
    """The events of a row of ``stream``."""
    return packing.unpack(stream, 0, packing.PackedRow(seq, count, prev, digest, data))


def _names_record(name: str) -> bytes:
    """The start of a ``names`` row's record holding ``name``: its header (its size, the
    text's type, the key's: 1, a constant of no bytes), then the text."""
    return bytes([3, 2 * len(name.encode()) + 13, 9]) + name.encode()


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
        with Runtime(store, RuntimeSettings(model=settings, workdir=cwd)) as runtime:
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
@pytest.mark.parametrize("where", ["data text", "data head", "hash", "stream", "seq", "count"])
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


SLOW = Step(text="Counting:\n" + "one " * 2000, chunk_chars=10, chunk_delay=0.1)
"""A reply whose first line streams at once, and whose rest takes 80 s."""

STOP_WITHIN_SEC = 1 + 10.0
"""How long a stop may take before the test calls it a hang: the grace period (1 s here) and
a generous margin on a busy machine."""


def stopped(running: Running, sigs: tuple[int, ...]) -> tuple[int, list[str]]:
    """Send ``sigs`` back to back (``os.kill``, no wait between); return the exit code and
    what it said on stderr after its first line (if any)."""
    assert running.process.stderr is not None
    for sig in sigs:
        os.kill(running.process.pid, sig)
    code = running.process.wait(STOP_WITHIN_SEC)  # raises on a hang
    said = running.process.stderr.read().splitlines()
    running.process.stderr.close()
    running.out.close()
    return code, said


def no_live_lease(cli: Cli, session: str | None = None) -> None:
    """``session`` (default: every session in the store) has its lease released (or never had
    one), and verifies."""
    if not cli.store.exists():
        return
    with SqliteStore(cli.store) as store:
        sessions = [session] if session else [info.stream for info in store.streams()]
        for session in sessions:
            lease = store.leases.get(session)
            assert lease is None or not lease.live, f"session {session}: lease left live"
    for session in sessions:
        assert cli("verify", session).returncode == 0


@pytest.mark.parametrize(
    "sigs",
    [
        (signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGTERM),
        (signal.SIGTERM, signal.SIGINT),
    ],
    ids=["INT+INT", "TERM+TERM", "TERM+INT"],
)
def test_two_signals_at_once_mid_reply_stop_exec_never_hanging(
    cli: Cli, server: ScriptedModelServer, sigs: tuple[int, int]
) -> None:
    cli.configure(server.base_url)
    for _ in range(2):  # either path each round; a hang fails the first
        server.push(SLOW)
        running = cli.spawn("exec", "--grace-sec", "1", "How many?")
        assert running.out.next() == "Counting:\n"  # mid-reply
        code, said = stopped(running, sigs)
        started, *lines = said
        assert started.startswith("session "), said
        (line,) = lines  # one line, and only one
        # Two signals pending at once are delivered lowest number first (SIGINT before
        # SIGTERM): the first seen gives the code.
        seen = sorted(sigs) if sigs[0] != sigs[1] else list(sigs)
        first, second = (signal.Signals(sig).name for sig in seen)
        assert code == 128 + seen[0] or code == 128 + sigs[0], said
        at_once = "plait: stopped at once by a second signal ("
        if line.startswith(at_once):
            names = line[len(at_once) :].split(")")[0].split(", then ")
            assert names[0] == signal.Signals(code - 128).name, line
            assert sorted(names) == sorted([first, second]), line
            continue
        # Two of one kind sent together may reach the process as one (the kernel keeps one
        # of a kind pending): that one gives the clean stop. Two kinds always arrive as two.
        assert sigs[0] == sigs[1], line
        assert line.startswith(f"plait: stopped by {first}: task "), line
        assert line.endswith("handed back"), line
        no_live_lease(cli, started.split()[1])  # one stopped at once earlier is left live


def in_read_of_stdin(pid: int, within: float = 30.0) -> None:
    """Wait until the process's main thread blocks reading fd 0 (``/proc/PID/syscall``: the
    read system call, 0 on x86-64 and 63 on arm64, on fd 0x0)."""
    deadline = time.monotonic() + within
    syscall = Path(f"/proc/{pid}/syscall")
    while time.monotonic() < deadline:
        fields = syscall.read_text().split()
        if fields[:2] in (["0", "0x0"], ["63", "0x0"]):
            return
        os.sched_yield()
    raise AssertionError(f"process {pid} did not read stdin within {within} s")


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs /proc/PID/syscall")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_while_exec_starts_stops_it_with_one_line(
    cli: Cli, server: ScriptedModelServer, sig: int
) -> None:
    # ``plait exec -`` waits for its prompt on stdin, before it opens the runtime: a signal
    # there stops it at once, before any lease, with the line of a stop.
    cli.configure(server.base_url)
    process = subprocess.Popen(
        [sys.executable, "-m", "plait", "exec", "-"],
        cwd=cli.cwd,
        env=cli.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with process:
        in_read_of_stdin(process.pid)
        os.kill(process.pid, sig)
        code = process.wait(STOP_WITHIN_SEC)  # stdin is still open: it must not wait for it
        said = process.communicate()[1].splitlines()
    assert (code, said) == (128 + sig, [f"plait: stopped by {signal.Signals(sig).name}"])
    assert server.requests == []
    no_live_lease(cli)


def test_a_signal_as_a_worker_starts_takes_no_lease_and_exits_with_one_line(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    url = str(cli.store)
    with cli.front(server.base_url) as front:
        waiting = front.start_session()
        session = waiting.session_id
        waiting.release()
        front.follow(session).submit("Count.")  # in its inbox: a worker would take it
    for after_line in (False, True):
        worker = cli.spawn("worker", "--store", url, "--grace-sec", "1")
        if after_line:  # its runtime is up; it has not looked at the inbox yet, or just has
            assert worker.err.next().startswith("worker ")
        worker.process.send_signal(signal.SIGTERM)  # as soon as it is spawned: nothing read
        code = worker.process.wait(STOP_WITHIN_SEC)
        said = worker.err.rest()
        worker.out.close()
        if code == -signal.SIGTERM:  # before Python ran plait: the default action, nothing held
            assert not after_line and said == []
        else:
            assert code == 143, said
            lines = [line for line in said if line.startswith("plait: ")]
            assert len(lines) == 1 and "stopped by SIGTERM" in lines[0], said
        no_live_lease(cli)
