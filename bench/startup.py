"""The start of a ``plait`` command: what every command pays before it does its work.

Run from the repository root: ``python bench/startup.py [--quick]`` (see bench/README.md). In a
fresh directory, ``plait demo`` records its session; then ``plait --version``, ``plait --help``,
``plait sessions``, ``plait log SESSION`` and ``plait audit SESSION`` run as a user runs them, a
fresh process each, round after round (each round runs every one once, so that a busy moment
falls on all alike), beside the floor every command pays: ``python -c "import plait"`` (and the
interpreter alone, ``python -c pass``), and what a command that reads the log imports whatever
the command line does (``READERS_FLOOR``). Printed: the median wall and CPU time (the process's
user and system time) of each, and how many modules it imports (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Line, table

from plait.events import SqliteStore

ENV = {name: value for name, value in os.environ.items() if not name.startswith("PLAIT_")}
"""The environment the commands run in: the demo's store, not one a ``PLAIT_`` variable names."""

READERS_FLOOR = "import plait._config, plait.events.projections, plait.actors.mcp._config"
"""What every command that reads the log imports whatever the CLI does: the configuration
(which reads the MCP servers' too), the store, the projections."""

BASELINES = ("python -c pass", 'python -c "import plait"', "import the store and configuration")
"""The rows that are not plait commands."""

GOALS = {"--version": 0.1, "--help": 0.1}
"""CPU seconds a command that runs nothing should stay under: argparse and the parser alone."""


def run_once(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Run ``argv`` in ``cwd``; return its wall and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=ENV, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def modules(argv: list[str], cwd: Path) -> int:
    """How many modules ``argv`` (a ``python`` command line) imports."""
    traced = [argv[0], "-X", "importtime", *argv[1:]]
    done = subprocess.run(traced, cwd=cwd, env=ENV, check=True, capture_output=True, text=True)
    return sum(line.startswith("import time:") for line in done.stderr.splitlines()) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 15")
    rounds = 3 if parser.parse_args().quick else 15
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        demo = [python, "-m", "plait", "demo"]
        subprocess.run(demo, cwd=cwd, env=ENV, check=True, capture_output=True)
        with SqliteStore(cwd / ".plait" / "plait.db", read_only=True) as store:
            session = next(iter(store.streams())).stream[:8]
        commands = {
            "python -c pass": [python, "-c", "pass"],
            'python -c "import plait"': [python, "-c", "import plait"],
            "import the store and configuration": [python, "-c", READERS_FLOOR],
            "plait --version": [python, "-m", "plait", "--version"],
            "plait --help": [python, "-m", "plait", "--help"],
            "plait sessions": [python, "-m", "plait", "sessions"],
            "plait log SESSION": [python, "-m", "plait", "log", session],
            "plait audit SESSION": [python, "-m", "plait", "audit", session],
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for argv in commands.values():  # one untimed run each: files in the page cache
            run_once(argv, cwd)
        for _ in range(rounds):
            for name, argv in commands.items():
                times[name].append(run_once(argv, cwd))
        counts = {name: modules(argv, cwd) for name, argv in commands.items()}

    def medians(name: str) -> tuple[float, float]:
        walls, cpus = zip(*times[name], strict=True)
        return statistics.median(walls), statistics.median(cpus)

    floor_wall, floor_cpu = medians('python -c "import plait"')

    def line(name: str) -> Line:
        wall, cpu = medians(name)
        goal = GOALS.get(name.removeprefix("plait "))
        return (
            f"{name} ({counts[name]} modules)",
            f"{wall:.3f} / {cpu:.3f} s",
            f"{floor_wall:.3f} / {floor_cpu:.3f} s",
            "" if name in BASELINES else f"{cpu / floor_cpu:.1f}x",
            f"cpu < {goal} s" if goal else "",
        )

    table(
        f"the start of a plait command: wall / CPU, median of {rounds} rounds",
        [line(name) for name in commands],
        'raw: python -c "import plait"; ratio: CPU, ours over raw',
    )


if __name__ == "__main__":
    main()
