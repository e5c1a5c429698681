"""How long SIGTERM takes to stop a ``plait worker`` that runs N tasks at once.

One ``plait worker --concurrency N --drain-sec S`` takes over N sessions, each with a task
whose reply streams for minutes (so none reaches a checkpoint by itself); once every task
runs, the worker is sent SIGTERM. Printed: the time from the signal to the worker's exit,
beside the goal (``S`` + 1 s: the drain is one deadline for all sessions, not ``S`` each);
then, right after its exit, how many leases are still live (goal: 0), how many tasks have their
end recorded (goal: N) and whether every session's chain verifies.

    python bench/drain.py                 # 8 sessions, --drain-sec 5, SQLite in a temp dir
    python bench/drain.py --sessions 4 --drain-sec 2
    python bench/drain.py --store postgresql://postgres@127.0.0.1:5432/test?schema=plait_drain
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plait.actors.model import ModelSettings
from plait.events import TaskCompleted, TaskStarted, TurnAborted
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

ENDLESS = Step(text="Counting:\n" + "one " * 5000, chunk_chars=10, chunk_delay=0.1)
"""A reply that streams for about 50 s: it reaches no checkpoint within the drain."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--drain-sec", type=float, default=5.0)
    parser.add_argument("--store", help="a store URL (default: a SQLite file in a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as server:
        cwd = Path(tmp)
        url = args.store or f"sqlite:///{cwd / 'plait.db'}"
        (cwd / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
        )
        n, drain = args.sessions, f"{args.drain_sec:g}"
        print(f"{n} sessions, a task in each: plait worker --concurrency {n} --drain-sec {drain}")
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(url, model=settings, owner_id="front", expire_every_sec=None) as front:
            sessions = []
            for _ in range(args.sessions):
                handle = front.start_session()
                sessions.append(handle.session_id)
                handle.release()
            server.push(*[ENDLESS] * args.sessions)
            env = {**os.environ, "OPENAI_API_KEY": "k"}
            argv = [sys.executable, "-m", "plait", "worker", "--store", url,
                    "--concurrency", str(n), "--drain-sec", drain]  # fmt: skip
            worker = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
            with front.store.subscribe() as tail:
                tasks = {front.follow(s).submit("Count.") for s in sessions}
                running: set[str] = set()
                while running != tasks:
                    event = tail.get(timeout=120)
                    assert event is not None, "the tasks did not all start"
                    if isinstance(event.body, TaskStarted) and event.task_id in tasks:
                        running.add(str(event.task_id))
            server.wait_for_requests(args.sessions, timeout=60)
            sent = time.monotonic()
            worker.send_signal(signal.SIGTERM)
            assert worker.stderr is not None
            said = worker.stderr.read()
            code = worker.wait(120)
            took = time.monotonic() - sent
            live = [s for s in sessions if (lease := front.store.lease(s)) and lease.live]
            ended = sum(
                1
                for s in sessions
                for event in front.store.read(s)
                if event.task_id in tasks and isinstance(event.body, TaskCompleted | TurnAborted)
            )
        verified = all(
            subprocess.run(
                [sys.executable, "-m", "plait", "verify", "--store", url, s],
                cwd=cwd, env=env, capture_output=True, check=False,
            ).returncode == 0
            for s in sessions
        )  # fmt: skip
    goal = args.drain_sec + 1
    print(f"  stop took {took:.2f} s (goal: within {goal:g} s)  exit code {code}")
    print(f"  live leases after exit: {len(live)} (goal: 0)")
    print(f"  tasks with their end recorded: {ended} of {args.sessions}")
    print(f"  every chain verifies: {verified}")
    print(f"  its line: {said.strip().splitlines()[-1] if said.strip() else '(none)'}"[:200])


if __name__ == "__main__":
    main()
