"""``plait sessions`` on a store of many sessions, some of them long.

Run from the repository root: ``python bench/listing.py [--quick]`` (see bench/README.md). The store
holds 200 sessions: 180 of one task of 3 turns (17 events), 20 of 5,000 events, of which 4 are
running a task of 1,000 events with a live lease, 4 were cut in one (a lapsed lease: crashed),
and the last 12 idle with their owner gone without handing them back (a lapsed lease: the one
state whose tasks waiting only the whole log tells). ``plait sessions`` (its 20 active last) and
``plait sessions --limit 0`` (all 200) are timed as a user runs them, a fresh process each, beside
the floor every listing pays: a process that opens the store and reads each session's last event.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Line, table

from plait.events import (
    ConversationOpened,
    InputText,
    ModelRequested,
    ModelResponded,
    NewEvent,
    SessionStarted,
    SqliteStore,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TokensCounted,
    TurnStarted,
    Usage,
)

FLOOR = """
import sys
from plait.events import SqliteStore
with SqliteStore(sys.argv[1], read_only=True) as store:
    for info in store.streams():
        store.read(info.stream, after=info.last_seq - 1)
"""
"""The floor: open the store, read each session's last event (what orders them)."""


def turns(conversation: str, task: str, count: int) -> list[NewEvent]:
    """``count`` model turns of ``task``: each a request, a reply and its tokens."""
    events = []
    for turn in range(1, count + 1):
        bodies = [
            TurnStarted(turn=turn),
            ModelRequested(model="m", tools_sha256="0" * 64, instructions_sha256="0" * 64),
            ModelResponded(text=f"step {turn} of the work, said in a sentence or two."),
            TokensCounted(usage=Usage(800 + turn, 20, 820 + turn)),
        ]
        events += [NewEvent(body, conversation, task) for body in bodies]
    return events


def task(n: int, conversation: str, prompt: str, turn_count: int, end: bool) -> list[NewEvent]:
    """A task of ``turn_count`` turns in ``conversation``, completed if ``end``."""
    plan = TaskPlan(f"t{n}", conversation, [InputText(prompt)])
    events = [NewEvent(TaskEnqueued(plan), conversation, plan.task_id)]
    events += [NewEvent(TaskStarted(), conversation, plan.task_id)]
    events += turns(conversation, plan.task_id, turn_count)
    if end:
        events.append(NewEvent(TaskCompleted(last_assistant_message="done"), conversation, f"t{n}"))
    return events


def build(path: Path, sessions: int, long_every: int, long_events: int) -> None:
    """Write the store: ``sessions`` sessions, every ``long_every``-th of them long."""
    with SqliteStore(path, synchronous="OFF") as store:
        for s in range(sessions):
            stream, root = f"s{s:04d}-bench", f"c{s:04d}"
            events = [
                NewEvent(SessionStarted(root_conversation_id=root, model="m")),
                NewEvent(ConversationOpened(), root),
            ]
            events += task(s * 1000, root, f"Question number {s}: what changed?", 3, True)
            long = s % long_every == long_every - 1
            if long:
                n = 1
                while len(events) < long_events - 4 * 250 - 3:
                    events += task(s * 1000 + n, root, "And then?", 20, True)
                    n += 1
                k = s // long_every
                events += task(s * 1000 + n, root, "Go on.", 250, end=k >= 8)
            store.append(stream, events, 0)
            if long:
                k = s // long_every
                if k < 8:  # running (a live lease), or cut (lapsed)
                    store.leases.acquire(stream, f"bench:{k}", 3600.0 if k < 4 else 0.001)
                else:  # idle, its owner gone without handing it back
                    store.leases.acquire(stream, f"bench:{k}", 0.001)


def timed(argv: list[str], repeats: int) -> float:
    """The median wall time of running ``argv``, ``repeats`` times."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50 sessions, 1 repeat")
    quick = parser.parse_args().quick
    sessions, repeats = (50, 1) if quick else (200, 5)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plait.db"
        build(path, sessions, 10, 5000)
        plait = [sys.executable, "-m", "plait", "--store", str(path), "sessions"]
        floor = timed([sys.executable, "-c", FLOOR, str(path)], repeats)
        shown = timed(plait, repeats)
        every = timed([*plait, "--limit", "0"], repeats)
        started = timed([sys.executable, "-m", "plait", "--help"], repeats)

    def line(label: str, ours: float, goal: str) -> Line:
        return (label, f"{ours:.2f} s", f"{floor:.2f} s", f"{ours / floor:.1f}x", goal)

    lines = [
        line("plait sessions (20 shown)", shown, "< 1 s"),
        line(f"--limit 0 ({sessions} shown)", every, "< 2 s"),
        ("plait --help (start-up)", f"{started:.2f} s", "", "", ""),
    ]
    table(
        f"plait sessions on {sessions} sessions (every tenth of 5,000 events), median of {repeats}",
        lines,
        "raw: a process that opens the store and reads each session's last event",
    )


if __name__ == "__main__":
    main()
