"""kill -9 a process that submits and runs tasks, again and again; nothing acknowledged is lost.

Each round starts a process on the store that resumes three sessions (taking each over once
the killed process's lease lapses: ``lease_sec`` 1 s) and submits tasks to them as fast as
the sessions take them, printing each id ``submit`` returned; the bench kills it with SIGKILL
at a random moment (1.2 to 3 s in). Every task's first model reply calls ``side_effect``, a
function tool that is not idempotent: each run of it appends a line to a file, keyed by the
call's id (the model puts its call id in the arguments). After the last round a process runs
what is left. Then every id a submit returned must be in the log exactly once and have ended
exactly once (completed, or aborted ``crashed`` by the recovery), no task id may be enqueued
twice (counted in a column of its own, not as lost), no key may be in the effects file twice
(a call run again after a crash), and every log must verify and replay clean. One table, a
row per store; ``bench/stop_loop.py`` uses its check and its table. ``run_store`` is one
store's loop; the moment of each kill is its parameter (``tests/replay/test_kill_loop.py`` runs
a few kills, at events it waits for).

    python bench/kill_loop.py                       # 50 kills on SQLite, 50 on PostgreSQL
    python bench/kill_loop.py --kills 5 --store sqlite
    python bench/kill_loop.py --store postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import psycopg

if str(Path(__file__).parent) not in sys.path:  # last: bench/mcp.py is named like the package
    sys.path.append(str(Path(__file__).parent))
from paced_model import _HEAD, PacedModelServer

import plait
from plait import _scripted_wire as wire
from plait._scripted_wire import ScriptedToolCall, Step
from plait.actors import ModelSettings
from plait.events import (
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    ToolCallCompleted,
    TurnAborted,
)
from plait.events.stores import open_store
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings

POSTGRES = os.environ.get("PLAIT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server of the default run."""

REPLY = Step(text="word " * 30, chunk_chars=10, chunk_delay=0.03)  # about 0.3 s
"""The answer to a request whose last message is the tool's output."""

EFFECTS_ENV = "PLAIT_BENCH_EFFECTS"
"""Names the file ``side_effect`` appends to (in the bench's child processes too)."""


def side_effect(key: str) -> str:
    """Record that this call ran: one line, the key, appended to the effects file; then
    work a while, so that kills land between the effect and the record of its result."""
    fd = os.open(os.environ[EFFECTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\n".encode())  # one write of a short line: whole or not at all
    finally:
        os.close(fd)
    time.sleep(0.3)  # the rest of the effect's work
    return "done"


TOOLS = [plait.tool(side_effect)]  # not idempotent: never run again after a crash


class ToolModel(PacedModelServer):
    """To a user's message, a call of ``side_effect`` keyed by its own fresh call id; to the
    tool's output, ``REPLY``."""

    tool = "side_effect"
    """The tool's name on the wire (an MCP server's is ``server__side_effect``)."""

    async def _reply(self, body: dict[str, Any], size: int, writer: asyncio.StreamWriter) -> None:
        self.served += 1
        step, ids = REPLY, []
        if (body.get("messages") or [{}])[-1].get("role") != "tool":
            call_id = f"call_{uuid.uuid4().hex[:12]}"
            arguments = msgspec.json.encode({"key": call_id}).decode()
            call = ScriptedToolCall(name=self.tool, arguments=arguments, id=call_id)
            step, ids = Step(text="Running it.", tool_calls=[call], chunk_delay=0.03), [call_id]
        head = {"id": f"chatcmpl-{self.served}", "object": "chat.completion.chunk"}
        head |= {"created": 0, "model": body.get("model", "scripted")}
        usage = wire.usage(step, size)
        chunks = wire.chunks(step, head, ids, usage, True, frozenset())
        lines = [b"data: " + msgspec.json.encode(c) + b"\n\n" for c in chunks]
        lines.append(b"data: [DONE]\n\n")
        writer.write(_HEAD)
        for i, line in enumerate(lines):
            if i:
                await asyncio.sleep(step.chunk_delay)
            if writer.is_closing():  # the client went away (the bench killed it)
                return
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def child(url: str, base_url: str, sessions: list[str]) -> None:
    """The killed process: resume ``sessions``, submit and run tasks until killed."""
    settings = ModelSettings(base_url=base_url, api_key="k", model="m")
    runtime = Runtime(
        url, RuntimeSettings(model=settings, tools=TOOLS, lease_sec=1.0, expire_every_sec=None)
    )
    runtime.recover()
    handles = [runtime.resume(s) for s in sessions]
    while True:
        handle = random.choice(handles)
        print(handle.submit("go"), flush=True)  # acknowledged: durable
        if random.random() < 0.3:
            handle.run("and wait", timeout=120)


class Row(msgspec.Struct):
    """What one store's loop counted."""

    store: str
    kills: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicate_enqueues: int = 0
    """Task ids enqueued more than once (a submit that took effect twice)."""
    unended: int = 0
    calls_run: int = 0
    unknown: int = 0
    duplicates: int = 0
    verify_failures: int = 0
    replay_failures: int = 0
    seconds: float = 0.0

    def failed(self) -> bool:
        """Whether anything was lost, enqueued or run twice, left unended, or fails to verify
        or replay."""
        counts = (self.lost, self.duplicate_enqueues, self.unended, self.duplicates)
        return any(counts) or bool(self.verify_failures or self.replay_failures)


class Child:
    """One round's process, in a process group of its own; the ids it prints (acknowledged
    tasks) are read as they come, its stderr goes to ``errors``."""

    def __init__(self, command: list[str], errors: Path) -> None:
        self._errors = errors
        with errors.open("w") as err:
            self.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
            )
        self.acknowledged: list[str] = []
        self._printed = threading.Condition()
        self._closed = False  # its stdout is at its end
        self._reader = threading.Thread(target=self._read, name="kill-loop-child", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._printed:
                self.acknowledged.append(line.strip())
                self._printed.notify_all()
        with self._printed:
            self._closed = True
            self._printed.notify_all()

    def wait_acknowledged(self, n: int, timeout: float) -> bool:
        """Wait until the process has printed ``n`` ids; False if it stopped printing first
        (it ended) or ``timeout`` seconds passed."""
        with self._printed:
            self._printed.wait_for(lambda: len(self.acknowledged) >= n or self._closed, timeout)
            return len(self.acknowledged) >= n

    def errors(self) -> str:
        """What the process wrote to stderr."""
        return self._errors.read_text()

    def kill(self) -> None:
        """SIGKILL its process group; return once it is gone and all it printed is read."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        if self._reader.is_alive():
            raise RuntimeError(f"process {self.process.pid}: stdout still open after SIGKILL")
        assert self.process.stdout is not None
        self.process.stdout.close()


Moment = Callable[[Child, random.Random], None]
"""Returns when the round's process is to be killed (or once it has ended by itself)."""


def at_random_time(child: Child, rng: random.Random) -> None:
    """Wait 1.2 to 3 s: the bench's moment."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.process.wait(timeout=rng.uniform(1.2, 3.0))


def run_store(
    name: str,
    url: str,
    kills: int,
    rng: random.Random,
    tmp: Path,
    moment: Moment = at_random_time,
) -> Row:
    """Kill ``kills`` children on the store at ``url``, each at its ``moment``, finish the
    sessions, count."""
    row = Row(store=name)
    effects = tmp / f"effects-{name}.txt"
    effects.touch()
    os.environ[EFFECTS_ENV] = str(effects)
    start = time.perf_counter()
    with ToolModel(REPLY) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(
            url, RuntimeSettings(model=settings, tools=TOOLS, expire_every_sec=None)
        ) as runtime:
            sessions = [runtime.start_session() for _ in range(3)]
            ids = [s.session_id for s in sessions]
            for session in sessions:
                session.release(10)
        acknowledged: list[str] = []
        command = [sys.executable, __file__, "--child", url, server.base_url, *ids]
        for kill in range(kills):
            child = Child(command, tmp / f"child-{name}.err")
            try:
                moment(child, rng)
                if child.process.poll() is not None:
                    raise SystemExit(
                        f"{name} round {kill}: the process ended by itself:\n{child.errors()}"
                    )
            finally:
                child.kill()
            acknowledged += child.acknowledged
            row.kills += 1
            print(
                f"\r{name}: kill {kill + 1}/{kills}, {len(acknowledged)} acknowledged",
                end="",
                file=sys.stderr,
            )
        print(file=sys.stderr)
        with Runtime(
            url, RuntimeSettings(model=settings, tools=TOOLS, expire_every_sec=None, lease_sec=1.0)
        ) as rt:
            handles = [rt.resume(s) for s in ids]  # taken over once the leases lapse
            for handle in handles:
                handle.run("last", timeout=300)  # runs after everything queued before it
    check(url, ids, acknowledged, effects, row)
    row.seconds = time.perf_counter() - start
    print(table([row]), file=sys.stderr)  # kept if a later store fails
    return row


def check(
    url: str,
    ids: list[str],
    acknowledged: list[str],
    effects: Path,
    row: Row,
    tools: Iterable[Any] = TOOLS,
) -> None:
    """Count lost, doubly enqueued and unended tasks, calls run twice, verify and replay
    failures into ``row`` (``tools``: the function tools the sessions were run with)."""
    enqueued: collections.Counter[str] = collections.Counter()
    ended: collections.Counter[str] = collections.Counter()
    with open_store(url) as store:
        for sid in ids:
            for event in store.read(sid):
                body, task = event.body, event.task_id or ""
                if isinstance(body, ToolCallCompleted) and body.outcome == "unknown":
                    row.unknown += 1  # cut by a kill: may have run, so never run again
                elif isinstance(body, TaskEnqueued):
                    enqueued[task] += 1
                elif isinstance(body, TaskCompleted | TaskDropped) or (
                    isinstance(body, TurnAborted) and body.reason != "replaced"
                ):
                    ended[task] += 1
            verified = store.verify(sid)
            if not verified.ok:
                row.verify_failures += 1
                print(f"session {sid}: verify: {verified}", file=sys.stderr)
            replayed = replay(store, sid, timeout=30, tools=list(tools))
            if not replayed.ok:
                row.replay_failures += 1
                assert replayed.divergence is not None
                print(replayed.divergence.message(), file=sys.stderr)  # names the session
    row.acknowledged = len(acknowledged)
    row.lost = sum(1 for t in acknowledged if enqueued[t] == 0)
    row.duplicate_enqueues = sum(1 for n in enqueued.values() if n > 1)
    for task, n in enqueued.items():
        if n > 1:
            print(f"task {task}: enqueued {n} times", file=sys.stderr)
    row.unended = sum(1 for t in acknowledged if ended[t] != 1)
    runs = collections.Counter(effects.read_text().split())
    row.calls_run = len(runs)
    row.duplicates = sum(n - 1 for n in runs.values() if n > 1)


Column = tuple[str, Callable[[Any], str]]
"""A table's column: its heading (with the value it must have, if any) and its cell of a row."""

COLUMNS: list[Column] = [
    ("store", lambda r: r.store),
    ("kills", lambda r: str(r.kills)),
    ("acknowledged", lambda r: str(r.acknowledged)),
    ("lost (0)", lambda r: str(r.lost)),
    ("duplicate enqueues (0)", lambda r: str(r.duplicate_enqueues)),
    ("not ended once (0)", lambda r: str(r.unended)),
    ("tool calls run", lambda r: str(r.calls_run)),
    ("cut by a kill", lambda r: str(r.unknown)),
    ("run twice (0)", lambda r: str(r.duplicates)),
    ("verify failures (0)", lambda r: str(r.verify_failures)),
    ("replay failures (0)", lambda r: str(r.replay_failures)),
    ("seconds", lambda r: f"{r.seconds:.0f}"),
]
"""The kill loop's table."""


def table(rows: list[Any], columns: list[Column] = COLUMNS) -> str:
    """The rows as one aligned table, a column per count (the first left-aligned)."""
    cells = [[head for head, _ in columns]] + [[cell(r) for _, cell in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        " | ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=50, help="kills per store (default 50)")
    parser.add_argument(
        "--store",
        action="append",
        help="'sqlite' or a PostgreSQL URL; repeatable (default: sqlite and PLAIT_BENCH_POSTGRES)",
    )
    args = parser.parse_args()
    rng = random.Random(7)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.store or ["sqlite", POSTGRES]:
            if store == "sqlite":
                rows.append(
                    run_store("sqlite", str(Path(tmp) / "plait.db"), args.kills, rng, Path(tmp))
                )
                continue
            schema = f"plait_kill_{uuid.uuid4().hex[:8]}"
            try:
                rows.append(
                    run_store("postgresql", f"{store}?schema={schema}", args.kills, rng, Path(tmp))
                )
            finally:
                with psycopg.connect(store, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(table(rows))  # the table, once every store is done
    bad = [r.store for r in rows if r.failed()]
    if bad:
        raise SystemExit(f"FAILED on {', '.join(bad)}")


if __name__ == "__main__":
    main()
