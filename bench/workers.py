"""Sessions spread over 1, 2 and 4 ``plait worker`` processes on PostgreSQL.

A front end (this process: ``Runtime.follow``, which never runs a session) submits tasks to S
sessions, K one after the other in each, all sessions at once; ``plait worker`` processes take
the sessions over from the inbox and run them against a paced model server (each reply about
50 ms). Printed per worker count: tasks/s, p50/p99 task latency (submit to the end seen in the
log), and where the CPU went (workers, PostgreSQL, this front end) on this machine's cores.
Then, with two workers running 16 sessions, the one that owns the most is killed with SIGKILL
while tasks run: the time from the kill to the first event the other appends in each session
the dead one owned, beside ``lease_sec``.

    python bench/workers.py            # S=128, K=5, lease 5 s; 1, 2, 4 and 8 workers
    python bench/workers.py --quick    # S=16, K=3, lease 2 s

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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from paced_model import PacedModelServer

from plait.actors.model import ModelSettings
from plait.events import Event, TaskCompleted
from plait.runtime import Runtime, SessionHandle
from plait.scripted_wire import Step

URL = os.environ.get("PLAIT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REPLY = Step(text="abcdef" * 10, chunk_chars=6, chunk_delay=0.005)
CONCURRENCY = 16
"""Sessions each worker runs at once (``plait worker --concurrency``)."""


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def postgres_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip().startswith("postgres"):
                    found.append(int(entry.name))
    return found


@contextlib.contextmanager
def workers(n: int, url: str, cwd: Path, lease_sec: float) -> Iterator[list[subprocess.Popen[str]]]:
    """``n`` ``plait worker`` processes, each ready; drained with SIGTERM at the end."""
    env = {**os.environ, "OPENAI_API_KEY": "k"}
    argv = [sys.executable, "-m", "plait", "worker", "--store", url]
    argv += ["--lease-sec", f"{lease_sec:g}", "--concurrency", str(CONCURRENCY)]
    argv += ["--idle-sec", "0.5"]  # a session with no work goes back for any worker to take
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


def throughput(front: Runtime, handles: list[SessionHandle], args: argparse.Namespace) -> None:
    cores = os.cpu_count() or 1
    print(f"\n{len(handles)} sessions x {args.tasks} tasks, replies of about 50 ms, {cores} cores")
    print(f"{'workers':>7} {'tasks/s':>8} {'p50 ms':>7} {'p99 ms':>7}   CPU cores used: "
          "workers / postgres / front end")  # fmt: skip
    rows = []
    for n in (1, 2, 4) if args.quick else (1, 2, 4, 8):
        with workers(n, args.url, args.dir, args.lease_sec) as started:
            pids, pg = [p.pid for p in started], postgres_pids()
            before = (cpu_of(pids), cpu_of(pg), time.process_time())
            wall = time.perf_counter()
            latencies = asyncio.run(drive(handles, args.tasks))
            wall = time.perf_counter() - wall
            used = (cpu_of(pids), cpu_of(pg), time.process_time())
        spent = [(b - a) / wall for a, b in zip(before, used, strict=True)]
        q = statistics.quantiles(latencies, n=100)
        rows.append((n, len(latencies) / wall, sum(spent), spent[1]))
        print(
            f"{n:>7} {rows[-1][1]:>8.1f} {q[49] * 1000:>7.0f} {q[98] * 1000:>7.0f}"
            f"   {spent[0]:.2f} / {spent[1]:.2f} / {spent[2]:.2f} of {cores}"
        )
    n, _, busy, pg = rows[-1]
    if busy >= 0.7 * cores:
        limit = f"this machine's {cores} cores (busy {busy:.2f}; postgres {pg:.2f} of them)"
    elif pg >= 0.8:
        limit = f"postgres (a core busy: {pg:.2f})"
    else:
        running = min(n * CONCURRENCY, len(handles))
        limit = f"the tasks' own time: {running} sessions run at once, each one task at a time"
    print(f"limit at {n} workers: {limit}")


def takeover(front: Runtime, handles: list[SessionHandle], args: argparse.Namespace) -> None:
    print(f"\ntakeover after kill -9 of one of 2 workers running {len(handles)} sessions "
          f"(lease_sec {args.lease_sec:g}; bound lease_sec + 2 s)")  # fmt: skip
    with workers(2, args.url, args.dir, args.lease_sec) as started:
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
    args = parser.parse_args()
    args.sessions = args.sessions or (16 if args.quick else 128)
    args.tasks = args.tasks or (3 if args.quick else 5)
    args.lease_sec = args.lease_sec or (2.0 if args.quick else 5.0)
    schema = f"plait_bench_{uuid.uuid4().hex[:10]}"
    args.url = f"{URL}?schema={schema}"
    try:
        with tempfile.TemporaryDirectory() as tmp, PacedModelServer(REPLY) as server:
            args.dir = Path(tmp)
            (args.dir / "plait.toml").write_text(
                f'[model]\nbase_url = "{server.base_url}"\nmodel = "m"\n'
            )
            settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
            with Runtime(args.url, model=settings, owner_id="front", expire_every_sec=None) as rt:
                ids = []
                for _ in range(args.sessions):
                    session = rt.start_session()
                    session.release(10)  # free: the workers take it when work comes
                    ids.append(session.session_id)
                handles = [rt.follow(sid) for sid in ids]
                throughput(rt, handles, args)
                # As many sessions as one worker may run: the survivor has room for them all.
                takeover(rt, handles[:CONCURRENCY], args)
    finally:
        with psycopg.connect(URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
