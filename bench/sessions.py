"""Many sessions in one process: N concurrent ``await session.arun`` beside N threads.

Run from the repository root: ``python bench/sessions.py [--quick]`` (see bench/README.md). The
scripted model server of the N concurrent tasks runs in a process of its own (as a real one
would), so that its threads do not take this process's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from paced_model import floor
from report import Line, table
from service import DELAY, helper

from plait.actors import ModelSettings
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

IDLE_SEC = 2.0
"""How long a session idles before the runtime passivates it, in the bench of held sessions."""


def model_server(replies: int) -> contextlib.AbstractContextManager[tuple[str, int]]:
    """The scripted model server in a process of its own (``bench/service.py``'s): ``replies``
    replies of ten chunks over DELAY seconds; yields its URL and pid."""
    return helper("--model", str(replies))


def runtime_on(model_url: str, tmp: Path) -> Runtime:
    settings = ModelSettings(base_url=model_url, api_key="bench", model="bench")
    return Runtime(
        tmp / "plait.db", RuntimeSettings(model=settings, workdir=tmp, expire_every_sec=None)
    )


async def on_the_loop(n: int, tmp: Path, freeze: bool = True) -> tuple[float, float, float]:
    """Wall time of n concurrent ``arun`` (one per session), the loop's worst lateness (how
    late a 10 ms timer on the same loop fired, at most), and this process's CPU seconds.

    With ``freeze``, the objects of the open sessions are moved out of the garbage collector's
    way first (``gc.freeze()``, as docs/embedding.md#many-sessions-in-one-process advises):
    CPython stops every thread for a full collection, for a time that grows with the objects
    the process tracks (about 100 ms with 1,000 sessions open here), and the run makes one due.
    """
    with model_server(n) as (url, _), runtime_on(url, tmp) as runtime:
        handles = [runtime.start_session() for _ in range(n)]
        if freeze:
            gc.collect()
            gc.freeze()
        late: list[float] = []
        running = True

        async def ticker() -> None:
            loop = asyncio.get_running_loop()
            while running:
                before = loop.time()
                await asyncio.sleep(0.01)
                late.append(loop.time() - before - 0.01)

        tick = asyncio.create_task(ticker())
        start, cpu = time.perf_counter(), os.times()
        outcomes = await asyncio.gather(*(h.arun("go", timeout=120) for h in handles))
        wall = time.perf_counter() - start
        used = sum(os.times()[:2]) - sum(cpu[:2])
        running = False
        await tick
        gc.unfreeze()
        assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok][:1]
        return wall, max(late, default=0.0), used


def unfrozen(n: int) -> list[Line]:
    """The same run with the garbage collector left as it is."""
    with tempfile.TemporaryDirectory() as tmp:
        wall, late, _ = asyncio.run(on_the_loop(n, Path(tmp), freeze=False))
    return [
        (f"N = {n}, no gc.freeze: wall s / lateness ms", f"{wall:.2f}", f"{late * 1000:.0f}",
         "", "a full collection in the run"),
    ]  # fmt: skip


def on_threads(n: int, tmp: Path) -> float:
    """Wall time of n ``run`` calls, one thread each (one session each)."""
    with model_server(n) as (url, _), runtime_on(url, tmp) as runtime:
        handles = [runtime.start_session() for _ in range(n)]
        threads = [threading.Thread(target=h.run, args=("go",)) for h in handles]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - start


def rss_mib() -> float:
    """This process's resident memory, MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    """Whether ``check()`` came true within ``timeout`` seconds (looked at every 50 ms)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def held(n: int, tmp: Path) -> list[Line]:
    """n sessions opened and used once, at most 1,000 with running actors at a time
    (``max_active_sessions``), then left idle until ``idle_sec`` passivates them: threads,
    memory, and the first call on a passive session beside the same call on an active one."""
    with ScriptedModelServer([Step(text="ok") for _ in range(n)]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="bench", model="bench")
        runtime = Runtime(
            tmp / "plait.db", RuntimeSettings(model=settings, workdir=tmp, expire_every_sec=None,
            idle_sec=IDLE_SEC, max_active_sessions=1000),
        )  # fmt: skip
        with runtime:
            base_threads, base_rss = threading.active_count(), rss_mib()
            handles = [runtime.start_session() for _ in range(n)]
            for handle in handles:
                assert handle.run("go", timeout=60).ok
            active_threads, active_rss = threading.active_count(), rss_mib()
            wait_until(lambda: runtime.active_sessions == 0, 10 * IDLE_SEC + 60)
            wait_until(lambda: threading.active_count() <= base_threads + 2, 30)
            passive_threads, passive_rss = threading.active_count(), rss_mib()
            woken, warm = [], []
            for handle in handles[:50]:
                start = time.perf_counter()
                handle.destroy("no such conversation")  # needs the actors: starts them again
                woken.append(time.perf_counter() - start)
                start = time.perf_counter()
                handle.destroy("no such conversation")
                warm.append(time.perf_counter() - start)
    ms = 1000 * statistics.median(woken)
    return [
        (f"{n} sessions: threads, after use / all idle", f"{active_threads - base_threads}",
         f"{passive_threads - base_threads}", "", "small constant"),
        (f"{n} sessions: RSS MiB per session, used / idle",
         f"{(active_rss - base_rss) / n:.3f}", f"{(passive_rss - base_rss) / n:.3f}", "", ""),
        (f"{n} sessions: first call, passive / active, ms", f"{ms:.2f}",
         f"{1000 * statistics.median(warm):.2f}", "", "< 20"),
    ]  # fmt: skip


def reopened(turns: int, tmp: Path) -> list[Line]:
    """One session with a long log, passivated: its first call again (it folds the log and
    starts the actors) beside the same call once it runs."""
    server = ScriptedModelServer([Step(text=f"reply {i}") for i in range(turns)])
    with server, runtime_on(server.base_url, tmp) as runtime:
        session = runtime.start_session()
        for i in range(turns):
            session.run(f"turn {i}", timeout=60)
        events = runtime.store.last_seq(session.session_id)
        woken, warm = [], []
        for _ in range(20):
            session.passivate()
            start = time.perf_counter()
            session.destroy("no such conversation")
            woken.append(time.perf_counter() - start)
            start = time.perf_counter()
            session.destroy("no such conversation")
            warm.append(time.perf_counter() - start)
    return [
        (f"a session of {events} events: first call, passive / active, ms",
         f"{1000 * statistics.median(woken):.2f}", f"{1000 * statistics.median(warm):.2f}", "",
         "< 20"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 10 and 100 only")
    args = parser.parse_args()
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    lines: list[Line] = []
    for n in sizes:
        with model_server(n) as (url, _):
            alone = floor(url, n)
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            wall, late, cpu = asyncio.run(on_the_loop(n, Path(a)))
            threaded = on_threads(n, Path(b))
        lines += [
            (f"N = {n}: the model server alone, s", f"{alone:.2f}", "", "",
             "a bare client's wall"),
            (f"N = {n}: wall s, arun / threads", f"{wall:.2f}", f"{threaded:.2f}",
             f"{wall / threaded:.2f}x", f"~{DELAY} (ideal)"),
            (f"N = {n}: timer lateness, max ms", f"{late * 1000:.0f}", "", "", "<= 50"),
            *([] if n < 1000 else unfrozen(n)),
            (f"N = {n}: CPU ms per task (user + system)", f"{cpu * 1000 / n:.2f}", "", "", ""),

        ]  # fmt: skip
    table(
        f"N concurrent tasks, one session each, each reply taking {DELAY} s",
        lines,
        "ours: await session.arun under asyncio.gather; raw: session.run on N threads",
    )
    lines = []
    for n in [100] if args.quick else [1000, 10_000]:
        with tempfile.TemporaryDirectory() as tmp:
            lines += held(n, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        lines += reopened(40 if args.quick else 145, Path(tmp))
    table(
        f"Sessions held by one process, used once, then idle (idle_sec={IDLE_SEC}, "
        "max_active_sessions=1000)",
        lines,
        "ours / raw columns: as each row names them (a session used once is a log of 9 events)",
    )


if __name__ == "__main__":
    main()
