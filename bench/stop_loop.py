"""Stop ``plait exec --session S`` and ``plait worker`` again and again, with signals at random
moments; nothing acknowledged is lost, enqueued twice or run twice, and the next exec goes on
at once.

Both kinds of process run in a project whose ``plait.toml`` names the bench's model
(``kill_loop.ToolModel``: a call of ``fx__side_effect`` keyed by its call id, then a streamed
reply) and one MCP server, ``fx``: this file run with ``--effects-server``, whose
``side_effect`` tool appends its key to a file (not idempotent: never run again after a stop).

- ``exec``: each round runs ``plait exec --session S "task N"`` and stops it at a random
  moment: while it starts, while the reply streams, during the tool call, or as the task ends;
  by SIGINT or SIGTERM (sometimes a second signal after it, sometimes SIGKILL instead). Then
  ``plait exec --session S "go on"`` from a new process, timed from its start to its exit:
  the continuation. A stop that said ``handed back`` must have released the lease.
- ``worker``: each round runs ``plait worker`` while a front end submits tasks to its sessions
  (``Runtime(url).follow(S).submit``, each id it returned acknowledged), and stops it the same
  ways. After the last round a worker runs what is left, then each session's continuation.

Then, as ``kill_loop.check`` counts them: every acknowledged task enqueued exactly once (a
duplicate ``TaskEnqueued`` has its own column) and ended exactly once, no key in the effects
file twice, every log verifies and replays clean. One table, a row per store and process
kind, with the continuations' median and max, and how many took over ``SLOW_SEC`` (each shown
with the events it recorded, at their times: a flag, not a failure); exit 1 if any count that
must be 0 is not.

    python bench/stop_loop.py                        # 6 stops of each kind on each store, ~5 min
    python bench/stop_loop.py --rounds 3 --store sqlite --kind exec
    python bench/stop_loop.py --store postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.append(sys.path.pop(0))  # bench/mcp.py is named like the mcp package
import kill_loop
import msgspec
import psycopg
from kill_loop import Row, ToolModel

from plait.actors import ModelSettings
from plait.events import (
    Event,
    EventStore,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.stores import open_store
from plait.runtime import Runtime, RuntimeSettings

SLOW_SEC = 10.0
"""A continuation that takes longer than this is flagged (it is about 4 s)."""

GRACE_SEC = 2.0
"""The stopped processes' ``--grace-sec``."""

KINDS = ("exec", "worker")
ENDS = (TaskCompleted, TaskDropped, TurnAborted)
"""What ends a task (but a ``TurnAborted(replaced)``: its task goes on)."""
MOMENTS = ("start", "streaming", "tool call", "task end")


class StopRow(Row):
    """What one store's loop of one kind of process counted."""

    process: str = ""
    stops: int = 0
    second_signals: int = 0
    sigkills: int = 0
    held_after_handed_back: int = 0
    """Stops that said ``handed back`` and left the lease held."""
    continuations: list[float] = msgspec.field(default_factory=list)
    """Each continuation's wall time (seconds, from its start to its exit)."""
    failed_continuations: int = 0
    stop_max: float = 0.0
    """The longest time a stopped process took to exit after its first signal (seconds)."""

    def failed(self) -> bool:
        """Also: a lease held after ``handed back``, a continuation that failed (a slow one is
        flagged, not failed: a busy machine takes seconds to start a process)."""
        return super().failed() or bool(self.held_after_handed_back or self.failed_continuations)

    def slow(self) -> int:
        """Continuations over ``SLOW_SEC``."""
        return sum(1 for t in self.continuations if t > SLOW_SEC)


COLUMNS: list[kill_loop.Column] = [
    ("store", lambda r: r.store),
    ("process", lambda r: r.process),
    ("stops (2nd signal, kill)", lambda r: f"{r.stops} ({r.second_signals}, {r.sigkills})"),
    ("stop max s", lambda r: f"{r.stop_max:.1f}"),
    *kill_loop.COLUMNS[2:-1],
    ("held after 'handed back' (0)", lambda r: str(r.held_after_handed_back)),
    ("continuation median/max s", lambda r: _times(r.continuations)),
    (f"over {SLOW_SEC:g} s", lambda r: str(r.slow())),
    ("continuations failed (0)", lambda r: str(r.failed_continuations)),
    ("seconds", lambda r: f"{r.seconds:.0f}"),
]


def _times(times: list[float]) -> str:
    return f"{statistics.median(times):.1f}/{max(times):.1f}" if times else "-"


def serve_effects() -> None:
    """The ``fx`` MCP server (stdio): ``side_effect(key)``, not idempotent."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("fx", log_level="WARNING")
    once = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
    server.tool(annotations=once)(kill_loop.side_effect)
    server.run("stdio")


class EffectsModel(ToolModel):
    tool = "fx__side_effect"


class Project:
    """A directory with the bench's ``plait.toml`` (the store at ``url``), ``plait`` run in it."""

    def __init__(self, where: Path, url: str, base_url: str, effects: Path) -> None:
        self.where = where
        self.url = url
        self.base_url = base_url
        where.mkdir(parents=True, exist_ok=True)
        fx = f'command = "{sys.executable}"\n'
        fx += f'args = ["{Path(__file__).resolve()}", "--effects-server"]\n'
        fx += f'env = {{ {kill_loop.EFFECTS_ENV} = "{effects}" }}\n'
        (where / "plait.toml").write_text(
            f'[model]\nbase_url = "{base_url}"\nmodel = "m"\nmax_attempts = 1\n'
            f'[store]\nurl = "{url}"\n[mcp_servers.fx]\n{fx}'
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "OPENAI_"))}
        self.env["XDG_CONFIG_HOME"] = str(where / "config")
        self.env["OPENAI_API_KEY"] = "k"

    def spawn(self, *args: str, errors: Path) -> subprocess.Popen[str]:
        """Start ``plait ARGS`` in a process group of its own; its stderr goes to ``errors``."""
        with errors.open("w") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "plait", *args],
                cwd=self.where,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )

    def run(self, *args: str, errors: Path, timeout: float = 120.0) -> tuple[int, float]:
        """Run ``plait ARGS`` to its end; return its exit code and wall time."""
        began = time.monotonic()
        process = self.spawn(*args, errors=errors)
        try:
            process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        return process.returncode, time.monotonic() - began


class Tail:
    """The store's events as they are recorded (``EventStore.subscribe``)."""

    def __init__(self, store: EventStore) -> None:
        self._subscription = store.subscribe()

    def skip(self) -> None:
        """Forget what is stored already."""
        while self._subscription.get(timeout=0) is not None:
            pass

    def wait(self, found: Callable[[Event], bool], process: subprocess.Popen[str]) -> bool:
        """Wait for an event ``found`` accepts while ``process`` runs (30 s at most)."""
        deadline = time.monotonic() + 30
        while process.poll() is None and (left := deadline - time.monotonic()) > 0:
            event = self._subscription.get(timeout=min(left, 0.5))
            if event is not None and found(event):
                return True
        return False

    def close(self) -> None:
        self._subscription.close()


class Loop:
    """One store's rounds of one kind of process."""

    def __init__(self, project: Project, row: StopRow, rng: random.Random, tmp: Path) -> None:
        self.project = project
        self.row = row
        self.rng = rng
        self.tmp = tmp
        self.said: list[str] = []
        """What each stop's process said last (its line), for the report."""
        self.how = ""
        """The last stop's moment and signals."""

    def start_session(self) -> str:
        """A new session, by ``plait exec`` run to its end; its id."""
        errors = self.tmp / "start.err"
        code, _ = self.project.run("exec", "hello", errors=errors)
        first = errors.read_text().splitlines()[0].split()
        if code != 0 or first[0] != "session":
            raise SystemExit(f"starting a session failed ({code}):\n{errors.read_text()}")
        return first[1]

    def stop(self, process: subprocess.Popen[str], moment: str, tail: Tail) -> None:
        """Wait for ``moment``, then stop ``process`` (a signal, sometimes a second, sometimes
        SIGKILL); wait for its exit, and kill what it left in its process group."""
        rng = self.rng
        if moment == "start":
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(rng.uniform(0.0, 1.5))
        elif moment == "streaming":
            tail.wait(lambda e: isinstance(e.body, TaskEnqueued), process)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(rng.uniform(0.2, 0.8))
        elif moment == "tool call":
            tail.wait(lambda e: isinstance(e.body, ToolCallStarted), process)
        else:
            tail.wait(lambda e: isinstance(e.body, TaskCompleted), process)
        kill = rng.random() < 0.1
        second = not kill and rng.random() < 0.2
        sent = time.monotonic()
        sigs = [signal.SIGKILL] if kill else [rng.choice([signal.SIGINT, signal.SIGTERM])]
        self.how = f"{moment}, {sigs[0].name}"
        with contextlib.suppress(ProcessLookupError):
            if kill:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.send_signal(sigs[0])
                if second:
                    time.sleep(rng.uniform(0.0, 0.5))  # the bench's moment of the second
                    sigs.append(rng.choice([signal.SIGINT, signal.SIGTERM]))
                    process.send_signal(sigs[1])
                    self.how += f" then {sigs[1].name}"
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            self.said.append(f"{self.row.process}: did not exit within 60 s of its signal")
        self.row.stop_max = max(self.row.stop_max, time.monotonic() - sent)
        with contextlib.suppress(ProcessLookupError):  # its MCP server, if left behind
            os.killpg(process.pid, signal.SIGKILL)
        self.row.stops += 1
        self.row.sigkills += kill
        self.row.second_signals += second

    def check_leases(self, errors: Path) -> None:
        """Every session a stop said it ``handed back`` has its lease released."""
        lines = errors.read_text().splitlines()
        last = lines[-1] if lines else ""
        self.said.append(f"[{self.how}] {last}")
        with open_store(self.project.url) as store:
            for session in re.findall(r"session (\S+) handed back", last):
                lease = store.leases.get(session)
                if lease is not None and lease.live:
                    self.row.held_after_handed_back += 1
                    print(f"\n{session}: lease held after '{last}': {lease}", file=sys.stderr)

    def go_on(self, session: str, n: int) -> None:
        """``plait exec --session S "go on"``, timed; a slow or failed one is shown with the
        events it recorded, each at its time from the continuation's start."""
        errors = self.tmp / f"go-on-{n}.err"
        with open_store(self.project.url) as store:
            before = store.last_seq(session)
        began = datetime.now(UTC)
        code, took = self.project.run("exec", "--session", session, f"go on {n}", errors=errors)
        self.row.continuations.append(took)
        if code != 0 or took > SLOW_SEC:
            self.row.failed_continuations += code != 0
            print(f"\n{session}: continuation {n}: exit {code} in {took:.1f} s:", file=sys.stderr)
            print(errors.read_text(), file=sys.stderr)
            with open_store(self.project.url) as store:
                for event in store.read(session, after=before):
                    at = (event.at - began).total_seconds()
                    name = type(event.body).__name__
                    print(f"  +{at:5.1f} s  seq {event.seq} {name}", file=sys.stderr)

    def exec_rounds(self, rounds: int) -> list[str]:
        """``rounds`` stops of ``plait exec --session S``, each followed by a continuation."""
        session = self.start_session()
        with open_store(self.project.url) as store:
            tail = Tail(store)
            try:
                for n in range(rounds):
                    tail.skip()
                    moment = MOMENTS[n % len(MOMENTS)]
                    errors = self.tmp / f"exec-{n}.err"
                    args = ("exec", "--grace-sec", f"{GRACE_SEC:g}", "--session", session)
                    process = self.project.spawn(*args, f"task {n}", errors=errors)
                    self.stop(process, moment, tail)
                    self.check_leases(errors)
                    self.go_on(session, n)
                    _progress(self.row, rounds)
            finally:
                tail.close()
        return [session]

    def worker_rounds(self, rounds: int) -> tuple[list[str], list[str]]:
        """``rounds`` stops of ``plait worker`` while a front end submits to three sessions;
        then a worker runs what is left, and each session's continuation. Return the sessions
        and the acknowledged task ids."""
        sessions = [self.start_session() for _ in range(3)]
        acknowledged: list[str] = []
        settings = ModelSettings(base_url=self.project.base_url, api_key="k", model="m")
        front = Runtime(
            self.project.url,
            RuntimeSettings(
                model=settings, owner_id=f"front-{uuid.uuid4().hex[:6]}", expire_every_sec=None
            ),
        )
        handles = [front.follow(s) for s in sessions]
        submitting = threading.Event()
        done = threading.Event()

        def submit() -> None:
            while not done.is_set():
                if submitting.wait(0.1):
                    acknowledged.append(self.rng.choice(handles).submit("go"))
                    done.wait(self.rng.uniform(0.3, 1.5))

        submitter = threading.Thread(target=submit, name="stop-loop-front", daemon=True)
        submitter.start()
        try:
            with open_store(self.project.url) as store:
                tail = Tail(store)
                try:
                    for n in range(rounds):
                        tail.skip()
                        errors = self.tmp / f"worker-{n}.err"
                        process = self.project.spawn(
                            "worker", "--grace-sec", f"{GRACE_SEC:g}", errors=errors
                        )
                        submitting.set()
                        self.stop(process, MOMENTS[n % len(MOMENTS)], tail)
                        self.check_leases(errors)
                        _progress(self.row, rounds)
                finally:
                    tail.close()
            done.set()
            submitter.join(30)
            self._run_what_is_left(sessions, acknowledged)
        finally:
            done.set()
            front.close()
        for n, session in enumerate(sessions):
            self.go_on(session, n)
        return sessions, acknowledged

    def _run_what_is_left(self, sessions: list[str], acknowledged: list[str]) -> None:
        """Run a worker until every acknowledged task has ended (or 120 s), then stop it."""
        errors = self.tmp / "worker-last.err"
        process = self.project.spawn("worker", errors=errors)
        deadline = time.monotonic() + 120
        with open_store(self.project.url) as store:
            while time.monotonic() < deadline and process.poll() is None:
                if _all_ended(store, sessions, set(acknowledged)):
                    break
                time.sleep(0.5)  # the bench polls; tests wait on events
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)


def _all_ended(store: EventStore, sessions: list[str], tasks: set[str]) -> bool:
    ended: set[str] = set()
    for session in sessions:
        for event in store.read(session):
            body = event.body
            if isinstance(body, ENDS) and getattr(body, "reason", "") != "replaced":
                ended.add(event.task_id or "")
    return ended >= tasks and not any(store.inbox.commands(s) for s in sessions)


def _progress(row: StopRow, rounds: int) -> None:
    print(f"\r{row.store} {row.process}: stop {row.stops}/{rounds}", end="", file=sys.stderr)


def run_store(
    name: str, url: str, kind: str, rounds: int, rng: random.Random, tmp: Path
) -> StopRow:
    """``rounds`` stops of ``kind`` on the store at ``url``; count."""
    row = StopRow(store=name, process=kind)
    where = tmp / f"{name}-{kind}"
    where.mkdir()
    effects = where / "effects.txt"
    effects.touch()
    start = time.perf_counter()
    with EffectsModel(kill_loop.REPLY) as server:
        project = Project(where / "project", url, server.base_url, effects)
        loop = Loop(project, row, rng, where)
        if kind == "exec":
            sessions = loop.exec_rounds(rounds)
            with open_store(url) as store:
                acknowledged = [
                    e.task_id or ""
                    for s in sessions
                    for e in store.read(s)
                    if isinstance(e.body, TaskEnqueued)
                ]
        else:
            sessions, acknowledged = loop.worker_rounds(rounds)
    print(file=sys.stderr)
    kill_loop.check(url, sessions, acknowledged, effects, row, tools=())
    row.kills = row.stops
    row.seconds = time.perf_counter() - start
    for line in loop.said:
        print(f"  {name} {kind}: {line}", file=sys.stderr)
    print(kill_loop.table([row], COLUMNS), file=sys.stderr)  # kept if a later one fails
    return row


def main() -> None:
    if sys.argv[1:2] == ["--effects-server"]:
        serve_effects()
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6, help="stops per store and kind (6)")
    parser.add_argument(
        "--store",
        action="append",
        help="'sqlite' or a PostgreSQL URL; repeatable (default: sqlite and PLAIT_BENCH_POSTGRES)",
    )
    parser.add_argument("--kind", action="append", choices=KINDS, help="exec, worker (both)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows: list[StopRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.store or ["sqlite", kill_loop.POSTGRES]:
            for kind in args.kind or KINDS:
                if store == "sqlite":
                    url = str(Path(tmp) / f"{kind}.db")
                    rows.append(run_store("sqlite", url, kind, args.rounds, rng, Path(tmp)))
                    continue
                schema = f"plait_stop_{uuid.uuid4().hex[:8]}"
                try:
                    url = f"{store}?schema={schema}"
                    rows.append(run_store("postgresql", url, kind, args.rounds, rng, Path(tmp)))
                finally:
                    with psycopg.connect(store, autocommit=True) as conn:
                        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(kill_loop.table(rows, COLUMNS))
    bad = [f"{r.store} {r.process}" for r in rows if r.failed()]
    if bad:
        raise SystemExit(f"FAILED on {', '.join(bad)}")


if __name__ == "__main__":
    main()
