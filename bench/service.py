"""examples/service.py under load: C clients, each with a session, its event stream and a task.

Run from the repository root: ``python bench/service.py [--quick]`` (see bench/README.md).

Three processes, so that none takes another's GIL: the scripted model server; the service
(examples/service.py's app under uvicorn, on a SQLite log in a temporary directory); and this
one, whose C clients (one ``httpx2.AsyncClient``) drive it. The clients run apart from the
service because in one process their own work (C event streams parsed, 3C requests sent) would
hold the service's GIL and count as its latency. The processes still share the machine's
cores, and the clients cost about as much CPU as the service (the table shows both): on two
cores the figures understate the service. The baseline runs the same tasks in this process,
on threads, with no HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx2
import msgspec
import uvicorn
from paced_model import PacedModelServer
from report import Line, table

from plait import ModelSettings, Runtime, RuntimeSettings
from plait.testing import Step

SERVICE_PY = Path(__file__).resolve().parents[1] / "examples" / "service.py"
DELAY = 0.2
"""Seconds each scripted reply takes: the ideal latency of a task."""
WAIT = 300.0
"""Seconds to wait for anything before the run is given up."""
ENDS = {"TaskCompleted", "TurnAborted", "TaskDropped"}
"""The events that end a task."""
REQUESTS = 3
"""HTTP requests per client: POST /sessions, GET .../events, POST .../tasks."""


def script(n: int) -> list[Step]:
    # Ten chunks a reply, DELAY seconds in all: the model server is the only wait.
    return [Step(text="abcdef" * 10, chunk_chars=6, chunk_delay=DELAY / 10) for _ in range(n)]


def runtime_on(model_url: str, tmp: Path) -> Runtime:
    settings = ModelSettings(base_url=model_url, api_key="bench", model="bench")
    return Runtime(
        tmp / "plait.db", RuntimeSettings(model=settings, workdir=tmp, expire_every_sec=None)
    )


# -- the helper processes: each prints its URL, then serves until its stdin closes ---------


def serve_model(steps: int) -> None:
    """The benches' model server (``paced_model.py``), answering ``steps`` replies."""
    del steps  # it answers every request with the same reply
    with PacedModelServer(script(1)[0]) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


def load_service() -> ModuleType:
    """Import examples/service.py (not a package) by its path, as its tests do."""
    spec = importlib.util.spec_from_file_location("plait_service_example", SERVICE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


def serve_app(tmp: Path, model_url: str) -> None:
    """The service on a SQLite log in ``tmp``, under uvicorn on a free port."""
    app = load_service().create_app(runtime_on(model_url, tmp), stopping=lambda: server.should_exit)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", ws="none", backlog=4096
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    while not server.started:  # uvicorn has no event to wait on
        if not thread.is_alive():
            raise SystemExit("uvicorn stopped before it served (its log says why)")
        time.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    print(f"http://{host}:{port}", flush=True)
    sys.stdin.read()
    server.should_exit = True  # its shutdown closes the runtime, and so every session
    thread.join(WAIT)


@contextlib.contextmanager
def helper(*args: str) -> Iterator[tuple[str, int]]:
    """Run this script as a helper process; yield the URL it serves and its pid."""
    command = [sys.executable, __file__, *args]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    try:
        url = process.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"{' '.join(args)}: the helper exited ({process.wait()})")
        yield url, process.pid
    finally:
        process.stdin.close()
        try:
            process.wait(WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the clients ------------------------------------------------------------------------------


class Run(msgspec.Struct):
    """One measurement: C tasks at once."""

    wall: float
    """Seconds from the first client's first request to the last task's end."""
    latencies: list[float]
    """Per task, seconds from submitting it to its end."""
    cpu: float
    """CPU seconds the serving process spent meanwhile."""
    client_cpu: float = 0.0
    """CPU seconds the clients' process spent meanwhile (over HTTP)."""


async def one_client(http: httpx2.AsyncClient) -> float:
    """Open a session and its event stream, submit a task, read the stream to its end; return
    the seconds from the task's POST to the end event's arrival."""
    created = await http.post("/sessions")
    assert created.status_code == 201, created.text
    session_id = created.json()["session_id"]
    async with http.stream("GET", f"/sessions/{session_id}/events") as response:
        assert response.status_code == 200, response.status_code
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith(": session "):  # subscribed
                break
        start = time.perf_counter()
        posted = await http.post(f"/sessions/{session_id}/tasks", json={"prompt": "go"})
        assert posted.status_code == 202, posted.text
        task_id, event = posted.json()["task_id"], ""
        async for line in lines:
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif event in ENDS and line.startswith("data: ") and task_id in line:
                assert event == "TaskCompleted", line
                return time.perf_counter() - start
    raise AssertionError(f"session {session_id}: the stream ended before the task did")


async def over_http(c: int, url: str, pid: int) -> Run:
    """C clients at once against the service at ``url`` (process ``pid``)."""
    pool = httpx2.Limits(max_connections=2 * c + 10, max_keepalive_connections=2 * c + 10)
    async with httpx2.AsyncClient(base_url=url, timeout=WAIT, limits=pool) as http:
        await one_client(http)  # warm-up: the service's first model call imports its client
        cpu, ours, start = cpu_seconds(pid), time.process_time(), time.perf_counter()
        latencies = await asyncio.gather(*(one_client(http) for _ in range(c)))
        wall = time.perf_counter() - start
        return Run(wall, latencies, cpu_seconds(pid) - cpu, time.process_time() - ours)


def in_process(c: int, model_url: str, tmp: Path) -> Run:
    """The same C tasks, each ``start_session`` then ``session.run`` on a thread of its own."""
    with runtime_on(model_url, tmp) as runtime:
        assert runtime.start_session().run("warm up", timeout=WAIT).ok
        latencies, failed = [math.nan] * c, []

        def one(i: int) -> None:
            handle = runtime.start_session()
            start = time.perf_counter()
            outcome = handle.run("go", timeout=WAIT)
            latencies[i] = time.perf_counter() - start
            if not outcome.ok:
                failed.append(outcome)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(c)]
        cpu, start = time.process_time(), time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
        assert not failed and not any(map(math.isnan, latencies)), failed[:1]
        return Run(wall, latencies, time.process_time() - cpu)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q * len(ranked)) - 1)]


def measure(c: int) -> list[Line]:
    """Rows for C clients: the service over HTTP beside the same tasks in-process."""
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        with (
            helper("--model", str(c + 1)) as (model_url, _),
            helper("--serve", a, model_url) as (url, pid),
        ):
            ours = asyncio.run(over_http(c, url, pid))
        with helper("--model", str(c + 1)) as (model_url, _):
            raw = in_process(c, model_url, Path(b))
    p50, raw50 = percentile(ours.latencies, 0.5), percentile(raw.latencies, 0.5)
    p99, raw99 = percentile(ours.latencies, 0.99), percentile(raw.latencies, 0.99)
    cpu, raw_cpu = 1000 * ours.cpu / c, 1000 * raw.cpu / c
    return [
        (f"C = {c}: wall s", f"{ours.wall:.2f}", f"{raw.wall:.2f}",
         f"{ours.wall / raw.wall:.2f}x", ""),
        (f"C = {c}: task latency p50 s", f"{p50:.3f}", f"{raw50:.3f}", f"{p50 / raw50:.2f}x",
         f"~{DELAY} (ideal)"),
        (f"C = {c}: task latency p99 s", f"{p99:.3f}", f"{raw99:.3f}", f"{p99 / raw99:.2f}x", ""),
        (f"C = {c}: tasks/s", f"{c / ours.wall:.0f}", f"{c / raw.wall:.0f}",
         f"{raw.wall / ours.wall:.2f}x", ""),
        (f"C = {c}: HTTP requests/s, all endpoints", f"{REQUESTS * c / ours.wall:.0f}", "", "",
         ""),
        (f"C = {c}: CPU ms per task, serving process", f"{cpu:.1f}", f"{raw_cpu:.1f}",
         f"{cpu / raw_cpu:.2f}x", ""),
        (f"C = {c}: CPU ms per task, clients' process", f"{1000 * ours.client_cpu / c:.1f}", "",
         "", ""),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="C = 10 and 100 only")
    parser.add_argument("--model", type=int, help=argparse.SUPPRESS)  # a helper process
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)  # a helper process
    args = parser.parse_args()
    if args.model is not None:
        return serve_model(args.model)
    if args.serve is not None:
        return serve_app(Path(args.serve[0]), args.serve[1])
    lines: list[Line] = []
    for c in [10, 100] if args.quick else [10, 100, 500]:
        lines += measure(c)
    table(
        f"C clients at once, each a session, its SSE stream and one task; replies take {DELAY} s",
        lines,
        "ours: examples/service.py under uvicorn, over HTTP from another process; "
        "raw: the same tasks with session.run on C threads in-process",
    )


if __name__ == "__main__":
    main()
