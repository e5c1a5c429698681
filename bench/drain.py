"""How long SIGTERM (or SIGINT) takes to stop a ``plait worker`` that runs N tasks at once.

One ``plait worker --concurrency N --drain-sec S`` takes over N sessions, each with a task
whose reply streams for minutes (so none reaches a checkpoint by itself); once every task
runs, the worker is sent SIGTERM. Printed: the time from the signal to the worker's exit,
beside the goal (``S`` + 1 s: the drain is one deadline for all sessions, not ``S`` each);
then, right after its exit, how many leases are still live (goal: 0), how many of its MCP
servers still run (goal: 0), how many tasks have their end recorded (goal: N) and whether
every session's chain verifies.

With ``--mcp M``, each session has M stdio MCP servers (``tests/mcp/server.py``); with
``--call``, each task is in a minute-long call of one when the signal comes; with
``--early``, the signal comes as the tasks start, while their servers start.

    python bench/drain.py                 # 8 sessions, --drain-sec 5, SQLite in a temp dir
    python bench/drain.py --sessions 4 --drain-sec 2
    python bench/drain.py --drain-sec 3 --mcp 2 --early --signal SIGINT
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

from plait.actors import ModelSettings
from plait.events import TaskCompleted, TaskStarted, TurnAborted
from plait.events.bodies import ToolCallStarted
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

MCP_SERVER = Path(__file__).parent.parent / "tests" / "mcp" / "server.py"
"""The stdio MCP server of plait's tests."""

ENDLESS = Step(text="Counting:\n" + "one " * 5000, chunk_chars=10, chunk_delay=0.1)
"""A reply that streams for about 50 s: it reaches no checkpoint within the drain."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--drain-sec", type=float, default=5.0)
    parser.add_argument("--store", help="a store URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--mcp", type=int, default=0, help="stdio MCP servers configured")
    parser.add_argument(
        "--call", action="store_true", help="each task in a minute-long MCP call (needs --mcp)"
    )
    parser.add_argument(
        "--early", action="store_true", help="signal as the tasks start, servers still starting"
    )
    parser.add_argument("--signal", choices=["SIGTERM", "SIGINT"], default="SIGTERM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedModelServer() as server:
        cwd = Path(tmp)
        url = args.store or f"sqlite:///{cwd / 'plait.db'}"
        mark = f"plait-drain-{os.getpid()}"  # in its servers' command lines
        servers = "".join(
            f'[mcp_servers.s{i}]\ncommand = "{sys.executable}"\n'
            f'args = ["{MCP_SERVER}", "--name", "{mark}"]\n'
            for i in range(args.mcp)
        )
        (cwd / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
            + servers
        )
        n, drain = args.sessions, f"{args.drain_sec:g}"
        print(f"{n} sessions, a task in each: plait worker --concurrency {n} --drain-sec {drain}")
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(
            url, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
        ) as front:
            sessions = []
            for _ in range(args.sessions):
                handle = front.start_session()
                sessions.append(handle.session_id)
                handle.release()
            slow = Step(tool_calls=[ScriptedToolCall("s0__slow", '{"seconds": 60}')])
            server.push(*[slow if args.call else ENDLESS] * args.sessions)
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
                    started = ToolCallStarted if args.call else TaskStarted
                    if isinstance(event.body, started) and event.task_id in tasks:
                        running.add(str(event.task_id))
            if not args.early:
                server.wait_for_requests(args.sessions, timeout=60)
            sent = time.monotonic()
            worker.send_signal(signal.Signals[args.signal])
            assert worker.stderr is not None
            said = worker.stderr.read()
            code = worker.wait(120)
            took = time.monotonic() - sent
            left = running_with(mark)
            live = [s for s in sessions if (lease := front.store.leases.get(s)) and lease.live]
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
    print(f"  MCP servers still running after exit: {left} (goal: 0)")
    print(f"  tasks with their end recorded: {ended} of {args.sessions}")
    print(f"  every chain verifies: {verified}")
    if code < 0:  # it died of a signal: all it said
        print(said)
    print(f"  its line: {said.strip().splitlines()[-1] if said.strip() else '(none)'}"[:200])


def running_with(mark: str) -> int:
    """How many processes have ``mark`` in their command line."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            count += mark.encode() in cmdline.read_bytes()
        except OSError:  # it ended meanwhile
            continue
    return count


if __name__ == "__main__":
    main()
