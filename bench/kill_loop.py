"""kill -9 a process that submits and runs tasks, again and again; nothing acknowledged is lost.

Each round starts a process on the store that resumes three sessions (taking each over once
the killed process's lease lapses: ``lease_sec`` 1 s) and submits tasks to them as fast as
the sessions take them, printing each id ``submit`` returned; the bench kills it with SIGKILL
at a random moment (0.2 to 2 s in). After the last round a process runs what is left. Then
every id a submit returned must be in the log exactly once, and have ended exactly once
(completed, or aborted ``crashed`` by the recovery), and every log must verify and replay clean.

    python bench/kill_loop.py                  # 60 kills on SQLite
    python bench/kill_loop.py --kills 20 --store postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from paced_model import PacedModelServer

from plait.actors.model import ModelSettings
from plait.events import TaskCompleted, TaskDropped, TaskEnqueued, TurnAborted
from plait.events.stores import open_store
from plait.replay import replay
from plait.runtime import Runtime
from plait.scripted_wire import Step

CHILD = textwrap.dedent(
    """
    import random, sys
    from plait.actors.model import ModelSettings
    from plait.runtime import Runtime

    url, base_url, *sessions = sys.argv[1:]
    settings = ModelSettings(base_url=base_url, api_key="k", model="m")
    runtime = Runtime(url, model=settings, lease_sec=1.0, expire_every_sec=None)
    runtime.recover()
    handles = [runtime.resume(s) for s in sessions]
    while True:
        handle = random.choice(handles)
        print(handle.submit("go"), flush=True)  # acknowledged: durable
        if random.random() < 0.3:
            handle.run("and wait", timeout=120)
    """
)

REPLY = Step(text="word " * 30, chunk_chars=10, chunk_delay=0.03)  # about 0.3 s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--store", help="a PostgreSQL URL (default: a SQLite file)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp, PacedModelServer(REPLY) as server:
        schema = f"plait_kill_{uuid.uuid4().hex[:8]}"
        url = f"{args.store}?schema={schema}" if args.store else str(Path(tmp) / "plait.db")
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        try:
            with Runtime(url, model=settings, expire_every_sec=None) as runtime:
                sessions = [runtime.start_session() for _ in range(3)]
                ids = [s.session_id for s in sessions]
                for session in sessions:
                    session.release(10)
            acknowledged: list[str] = []
            start = time.perf_counter()
            for kill in range(args.kills):
                child = subprocess.Popen(
                    [sys.executable, "-c", CHILD, url, server.base_url, *ids],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                try:
                    out, err = child.communicate(timeout=rng.uniform(1.2, 3.0))
                    raise SystemExit(f"round {kill}: the process ended by itself:\n{err}")
                except subprocess.TimeoutExpired:
                    child.kill()
                    out, _ = child.communicate()
                acknowledged += out.split()
                print(f"\rkill {kill + 1}/{args.kills}: {len(acknowledged)} acknowledged", end="")
            print(f" ({time.perf_counter() - start:.0f} s)")
            with Runtime(url, model=settings, expire_every_sec=None, lease_sec=1.0) as runtime:
                handles = [runtime.resume(s) for s in ids]  # taken over once the leases lapse
                for handle in handles:
                    handle.run("last", timeout=300)  # runs after everything queued before it
            check(url, ids, acknowledged)
        finally:
            if args.store:
                with psycopg.connect(args.store, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def check(url: str, ids: list[str], acknowledged: list[str]) -> None:
    enqueued: collections.Counter[str] = collections.Counter()
    ended: collections.Counter[str] = collections.Counter()
    how: collections.Counter[str] = collections.Counter()
    with open_store(url) as store:
        for sid in ids:
            for event in store.read(sid):
                body, task = event.body, event.task_id or ""
                if isinstance(body, TaskEnqueued):
                    enqueued[task] += 1
                elif isinstance(body, TaskCompleted | TaskDropped) or (
                    isinstance(body, TurnAborted) and body.reason != "replaced"
                ):
                    ended[task] += 1
                    how[type(body).__name__ + getattr(body, "reason", "")] += 1
            verified = store.verify(sid)
            replayed = replay(store, sid, timeout=30)
            print(f"session {sid[:8]}: {verified.events} events, verify {verified.ok}, "
                  f"replay {'clean' if replayed.ok else replayed.divergence}")  # fmt: skip
    lost = [t for t in acknowledged if enqueued[t] != 1]
    unended = [t for t in acknowledged if ended[t] != 1]
    twice = [t for t, n in enqueued.items() if n > 1]
    print(f"{len(acknowledged)} ids acknowledged; {len(lost)} not in the log exactly once; "
          f"{len(unended)} not ended exactly once; {len(twice)} enqueued twice")  # fmt: skip
    print("how they ended:", dict(how))
    if lost or unended or twice:
        raise SystemExit(f"FAILED: lost {lost[:5]}, unended {unended[:5]}, twice {twice[:5]}")
    print("every acknowledged task is in the log once and ended once")


if __name__ == "__main__":
    main()
