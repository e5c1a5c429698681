"""Sessions spread over 1, 2, 4 and 8 ``plait worker`` processes on PostgreSQL.

A front end (this process: ``Runtime.follow``, which never runs a session) submits tasks to S
sessions, K one after the other in each, all sessions at once; ``plait worker`` processes take
the sessions over from the inbox and run them against a paced model server (each reply about
50 ms). Printed per worker count: tasks/s beside the model-bound ideal (the run slots, workers
x ``--concurrency``, or the sessions if fewer, over one reply's time), CPU per task of the
workers, p50/p99 task latency (submit to the end seen in the log), and where the CPU went
(workers, PostgreSQL, this front end) on this machine's cores.
Then the capacity case: ONE ``plait worker --concurrency 8`` with nothing else set (its store and
model in ``plait.toml``), 24 sessions x 3 tasks whose replies take about 1 s, submitted by the
front end: wall time beside the model-bound 24 x 3 x 1 / 8 = 9 s (goal: within 2x), once with
the tasks one after the other in each session, once all submitted at once; and the most tasks
the log shows running at once; first with no MCP servers, then with the two stdio servers a
user's ``plait.toml`` has (``mcp-server-time``, ``mcp-server-git``), which no task calls: the
worker's CPU per task and the server processes it started (goal: within 1.3x of without).
Last, with two workers running 16 sessions, the one that owns the most is killed with SIGKILL
while tasks run: the time from the kill to the first event the other appends in each session
the dead one owned, beside ``lease_sec``.

    python bench/workers.py            # S=128, K=5, lease 5 s; 1, 2, 4 and 8 workers
    python bench/workers.py --quick    # S=16, K=3, lease 2 s
    python bench/workers.py --part capacity   # only the issue's case (throughput, takeover)

``PLAIT_BENCH_POSTGRES`` names the server (default postgresql://postgres@127.0.0.1:5432/test);
the bench uses a schema of its own and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from paced_model import PacedModelServer, floor

from plait._scripted_wire import Step
from plait.actors import ModelSettings
from plait.events import Event, EventStore, TaskCompleted, TaskStarted, TurnAborted
from plait.runtime import Runtime, RuntimeSettings, SessionHandle

URL = os.environ.get("PLAIT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REPLY = Step(text="abcdef" * 10, chunk_chars=6, chunk_delay=0.005)
SLOW_REPLY = Step(text="abcdef" * 10, chunk_chars=6, chunk_delay=0.08)
"""The issue's case: a reply of about 1 s."""
SCHEMAS: list[str] = []
"""The schemas the bench made, dropped at its end."""
CONCURRENCY = 16
"""Tasks each worker runs at once (``plait worker --concurrency``: its run slots; it keeps 8 x
as many sessions' actors by default, docs/processes.md#capacity)."""


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_busy() -> float:
    """CPU seconds this machine's cores have been busy so far (every process's)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def postgres_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip().startswith("postgres"):
                    found.append(int(entry.name))
    return found


@contextlib.contextmanager
def workers(n: int, cwd: Path, options: list[str]) -> Iterator[list[subprocess.Popen[str]]]:
    """``n`` ``plait worker`` processes with ``options``, each ready; drained with SIGTERM at
    the end."""
    env = {**os.environ, "OPENAI_API_KEY": "k"}
    argv = [sys.executable, "-m", "plait", "worker", *options]
    started = [
        subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    for process in started:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("worker "), line
    try:
        yield started
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in started:
            process.communicate(timeout=120)


async def drive(handles: list[SessionHandle], tasks: int) -> list[float]:
    """Run ``tasks`` tasks one after the other in every session at once; their latencies."""
    latencies: list[float] = []

    async def session(handle: SessionHandle) -> None:
        for i in range(tasks):
            start = time.perf_counter()
            outcome = await handle.arun(f"task {i}", timeout=300)
            latencies.append(time.perf_counter() - start)
            if outcome.status not in ("completed", "interrupted"):
                print(f"  {handle.session_id[:8]}: {outcome.status} {outcome.detail}")

    await asyncio.gather(*(session(handle) for handle in handles))
    return latencies


def options(args: argparse.Namespace) -> list[str]:
    """The throughput and takeover workers' options: the bench's store and lease."""
    return ["--store", args.url, "--lease-sec", f"{args.lease_sec:g}",
            "--concurrency", str(CONCURRENCY)]  # fmt: skip


def throughput(front: Runtime, handles: list[SessionHandle], args: argparse.Namespace) -> None:
    cores = os.cpu_count() or 1
    reply = floor(args.model_url, 1)  # one reply's own time, as the server paces it
    print(f"\n{len(handles)} sessions x {args.tasks} tasks, replies of {reply * 1000:.0f} ms, "
          f"--concurrency {CONCURRENCY}, {cores} cores; ideal: run slots / reply time")  # fmt: skip
    print(f"{'workers':>7} {'tasks/s':>8} {'ideal':>6} {'ratio':>6} {'CPU ms/task':>11} "
          f"{'p50 ms':>7} {'p99 ms':>7}   CPU cores: workers / postgres / front end")  # fmt: skip
    rows = []
    for n in (1, 2, 4) if args.quick else (1, 2, 4, 8):
        with workers(n, args.dir, options(args)) as started:
            pids, pg = [p.pid for p in started], postgres_pids()
            before = (cpu_of(pids), cpu_of(pg), time.process_time(), machine_busy())
            wall = time.perf_counter()
            latencies = asyncio.run(drive(handles, args.tasks))
            wall = time.perf_counter() - wall
            used = (cpu_of(pids), cpu_of(pg), time.process_time(), machine_busy())
        spent = [(b - a) / wall for a, b in zip(before, used, strict=True)]
        q = statistics.quantiles(latencies, n=100)
        rate = len(latencies) / wall
        ideal = min(n * CONCURRENCY, len(handles)) / reply
        per_task = (used[0] - before[0]) / len(latencies) * 1000
        rows.append((n, rate, ideal, sum(spent[:3]), spent[1], spent[3]))
        print(
            f"{n:>7} {rate:>8.1f} {ideal:>6.0f} {rate / ideal:>5.2f}x {per_task:>11.1f}"
            f" {q[49] * 1000:>7.0f} {q[98] * 1000:>7.0f}"
            f"   {spent[0]:.2f} / {spent[1]:.2f} / {spent[2]:.2f} of {cores}"
            f" (machine: {spent[3]:.2f} busy)"
        )
    for n, rate, ideal, busy, pg, machine in rows:
        if rate >= 0.8 * ideal:
            limit = "the model (at least 0.8x the ideal)"
        elif busy >= 0.7 * cores:
            limit = f"the CPU: {busy:.2f} of this machine's {cores} cores busy (postgres {pg:.2f})"
        elif machine >= 0.9 * cores:
            limit = (
                f"the CPU: the machine's {cores} cores are busy ({machine:.2f}), "
                f"{machine - busy:.2f} of them with other processes"
            )
        elif pg >= 0.8:
            limit = f"postgres (a core busy: {pg:.2f})"
        else:
            limit = "neither the model nor the CPU: the workers wait (goal: 0.8x the ideal)"
        print(f"  {n} worker{'s' if n > 1 else ' '}: {rate / ideal:.2f}x the ideal; limit: {limit}")


def running_at_once(store: EventStore, streams: set[str]) -> int:
    """The most tasks of ``streams`` the log shows running at once (started, not yet ended),
    in the order the store committed them."""
    running = most = 0
    for event in store.read_all(0, limit=None):
        if event.stream in streams:
            if isinstance(event.body, TaskStarted):
                running += 1
                most = max(most, running)
            elif isinstance(event.body, TaskCompleted | TurnAborted):
                running -= isinstance(event.body, TaskCompleted) or event.body.reason != "failed"
    return most


def capacity(args: argparse.Namespace) -> None:
    """The issue's case: one ``plait worker --concurrency 8``, defaults otherwise; without MCP
    servers, then with the two stdio servers a user's ``plait.toml`` has (``mcp-server-time``,
    ``mcp-server-git``), which no task calls."""
    sessions, tasks, places = 24, 3, 8
    with tempfile.TemporaryDirectory() as tmp, PacedModelServer(SLOW_REPLY) as server:
        reply = floor(server.base_url, 1)
        bound = sessions * tasks * reply / places
        print(f"\none `plait worker --concurrency {places}`, nothing else set: {sessions} sessions"
              f" x {tasks} tasks, replies of {reply:.2f} s; model-bound {bound:.1f} s, "
              f"goal within 2x ({2 * bound:.1f} s)")  # fmt: skip
        walls: dict[str, float] = {}
        for servers in ("no MCP servers", "2 stdio MCP servers"):
            print(f"  {servers}:")
            cwd = Path(tmp) / servers.split()[0]
            cwd.mkdir()
            toml = f'[model]\nbase_url = "{server.base_url}"\nmodel = "m"\n'
            if servers != "no MCP servers":
                toml += mcp_servers(cwd)
            for how in ("one after the other", "all at once"):
                shape = (sessions, tasks, places)
                walls[f"{servers}, {how}"] = capacity_run(
                    cwd, toml, server.base_url, how, shape, bound
                )
        for how in ("one after the other", "all at once"):
            ratio = walls[f"2 stdio MCP servers, {how}"] / walls[f"no MCP servers, {how}"]
            print(f"  {how}: with 2 stdio MCP servers {ratio:.2f}x the time without (goal <= 1.3x)")


def mcp_servers(cwd: Path) -> str:
    """The ``[mcp_servers]`` of a user's ``plait.toml``: the time and git servers (a git
    repository of one commit for the latter)."""
    repo = cwd / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("bench\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    bin_dir = Path(sys.executable).parent
    return (
        f'[mcp_servers.time]\ncommand = "{bin_dir / "mcp-server-time"}"\n'
        f'[mcp_servers.git]\ncommand = "{bin_dir / "mcp-server-git"}"\n'
        f'args = ["--repository", "{repo}"]\n'
    )


def capacity_run(
    cwd: Path, toml: str, model_url: str, how: str, shape: tuple[int, int, int], bound: float
) -> float:
    """One run of the capacity case in a store of its own; its wall time. Prints it with the
    worker's CPU per task and the MCP server processes it started."""
    sessions, tasks, places = shape
    schema = f"plait_bench_{uuid.uuid4().hex[:10]}"
    url = f"{URL}?schema={schema}"
    SCHEMAS.append(schema)
    (cwd / "plait.toml").write_text(f'{toml}[store]\nurl = "{url}"\n')
    settings = ModelSettings(base_url=model_url, api_key="k", model="m")
    with (
        Runtime(
            url, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
        ) as front,
        workers(1, cwd, ["--concurrency", str(places)]) as started,
        ServerCount(started[0].pid) as servers,
    ):
        ids = []
        for _ in range(sessions):
            session = front.start_session()
            session.release(10)  # free: the worker takes it when work comes
            ids.append(session.session_id)
        handles = [front.follow(sid) for sid in ids]
        cpu = cpu_of([started[0].pid])
        wall = asyncio.run(submit(handles, tasks, together=how == "all at once"))
        cpu = cpu_of([started[0].pid]) - cpu
        most = running_at_once(front.store, set(ids))
    per_task = cpu * 1000 / (sessions * tasks)
    print(f"    {how:<20} {wall:6.1f} s = {wall / bound:.2f}x the bound; worker CPU "
          f"{per_task:.1f} ms/task; {servers.seen()} MCP server processes started; "
          f"at most {most} tasks ran at once")  # fmt: skip
    return wall


class ServerCount:
    """Counts the processes a worker starts (its children), looking every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.children: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ServerCount:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _watch(self) -> None:
        while not self.stop.wait(0.05):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and int(entry.name) not in self.children:
                    with contextlib.suppress(OSError):
                        stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                        if int(stat[1]) == self.pid:
                            self.children.add(int(entry.name))

    def seen(self) -> int:
        return len(self.children)


async def submit(handles: list[SessionHandle], tasks: int, together: bool) -> float:
    """Run ``tasks`` tasks in every session, one after the other (``arun``) or all submitted
    at once (``asubmit``, then their ends read from the session's feed); the wall time."""
    start = time.perf_counter()

    async def session(handle: SessionHandle) -> None:
        if not together:
            for i in range(tasks):
                outcome = await handle.arun(f"task {i}", timeout=600)
                assert outcome.status == "completed", outcome
            return
        with handle.subscribe(transient=False) as feed:
            waiting = {await handle.asubmit(f"task {i}") for i in range(tasks)}
            async for item in feed:
                if isinstance(item, Event) and isinstance(item.body, TaskCompleted):
                    waiting.discard(item.task_id or "")
                    if not waiting:
                        return

    await asyncio.gather(*(session(handle) for handle in handles))
    return time.perf_counter() - start


def takeover(front: Runtime, handles: list[SessionHandle], args: argparse.Namespace) -> None:
    print(f"\ntakeover after kill -9 of one of 2 workers running {len(handles)} sessions "
          f"(lease_sec {args.lease_sec:g}; bound lease_sec + 2 s)")  # fmt: skip
    with workers(2, args.dir, options(args)) as started:
        stop = asyncio.Event()

        async def load() -> None:
            async def session(handle: SessionHandle) -> None:
                while not stop.is_set():
                    await handle.arun("more", timeout=300)

            await asyncio.gather(*(session(handle) for handle in handles))

        async def kill_and_watch() -> list[float]:
            owned: set[str] = set()
            for _ in range(100):  # until the load runs (at most 20 s)
                await asyncio.sleep(0.2)
                leases = await asyncio.to_thread(front.store.leases)
                by_worker = {
                    process: {
                        x.stream for x in leases if x.live and f":{process.pid}:" in (x.owner or "")
                    }
                    for process in started
                }
                doomed, owned = max(by_worker.items(), key=lambda item: len(item[1]))
                if owned:
                    break
            cut = {s: front.store.last_seq(s) for s in owned}
            killed = time.perf_counter()
            os.kill(doomed.pid, signal.SIGKILL)
            seen: dict[str, float] = {}
            with front.store.subscribe(front.store.read_all(0, limit=None)[-1].position) as tail:
                deadline = killed + args.lease_sec + 30
                while len(seen) < len(owned) and time.perf_counter() < deadline:
                    event: Event | None = await asyncio.to_thread(tail.get, 0.5)
                    if (
                        event is not None
                        and event.stream in owned
                        and event.seq > cut[event.stream]
                    ):
                        seen.setdefault(event.stream, time.perf_counter() - killed)
            stop.set()
            return sorted(seen.values())

        async def both() -> list[float]:
            running = asyncio.ensure_future(load())
            times = await kill_and_watch()
            await running
            return times

        times = asyncio.run(both())
    if times:
        print(f"  {len(times)} sessions taken over: first {times[0]:.2f} s, "
              f"median {statistics.median(times):.2f} s, last {times[-1]:.2f} s "
              f"(bound {args.lease_sec + 2:g} s)")  # fmt: skip
    else:
        print("  the killed worker owned no session at the kill")
    done = sum(
        1 for handle in handles for e in front.store.read(handle.session_id)
        if isinstance(e.body, TaskCompleted)
    )  # fmt: skip
    print(f"  logs verify: {all(front.store.verify(h.session_id).ok for h in handles)}; "
          f"{done} tasks completed in all")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="S=16, K=3, lease 2 s")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--lease-sec", type=float)
    parser.add_argument("--part", choices=("throughput", "capacity", "takeover"), action="append")
    args = parser.parse_args()
    args.sessions = args.sessions or (16 if args.quick else 128)
    args.tasks = args.tasks or (3 if args.quick else 5)
    args.lease_sec = args.lease_sec or (2.0 if args.quick else 5.0)
    parts = args.part or ["throughput", "capacity", "takeover"]
    schema = f"plait_bench_{uuid.uuid4().hex[:10]}"
    args.url = f"{URL}?schema={schema}"
    SCHEMAS.append(schema)
    try:
        with tempfile.TemporaryDirectory() as tmp, PacedModelServer(REPLY) as server:
            args.dir, args.model_url = Path(tmp), server.base_url
            (args.dir / "plait.toml").write_text(
                f'[model]\nbase_url = "{server.base_url}"\nmodel = "m"\n'
            )
            settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
            with Runtime(
                args.url, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
            ) as rt:
                ids = []
                for _ in range(args.sessions):
                    session = rt.start_session()
                    session.release(10)  # free: the workers take it when work comes
                    ids.append(session.session_id)
                handles = [rt.follow(sid) for sid in ids]
                if "throughput" in parts:
                    throughput(rt, handles, args)
                if "capacity" in parts:
                    capacity(args)
                if "takeover" in parts:
                    # As many sessions as one worker may run: the survivor has room for them all.
                    takeover(rt, handles[:CONCURRENCY], args)
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            for name in SCHEMAS:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


if __name__ == "__main__":
    main()
