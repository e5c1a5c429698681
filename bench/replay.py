"""How much faster a session replays than it ran.

Run from the repository root: ``python bench/replay.py [--quick]`` (see bench/README.md).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from report import Line, table

from plait.actors import ModelSettings
from plait.events.stores import SqliteStore
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

ANSWER = "Escaped quotes now survive the tokenizer; a regression test covers it, all 119 pass."
CHUNK_DELAY = 0.005
"""Seconds between streamed chunks: ~20 chunks make ~0.1 s a reply, far quicker than a real
model (seconds), so the ratio printed is a floor."""
TYPICAL_REPLY_SEC = 1.0
"""A hosted model's time for a short streamed reply, for the second ratio."""


def script(turns: int) -> list[Step]:
    """Every tenth task calls ``conv_list`` first; every reply streams with latency."""
    steps: list[Step] = []
    for i in range(turns):
        if i % 10 == 9:
            steps.append(Step(tool_calls=[ScriptedToolCall("conv_list")], chunk_delay=CHUNK_DELAY))
        steps.append(Step(text=ANSWER, chunk_chars=5, chunk_delay=CHUNK_DELAY))
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100 tasks instead of 1,000")
    args = parser.parse_args()
    turns = 100 if args.quick else 1000
    ids = itertools.count(1)
    with tempfile.TemporaryDirectory(prefix="plait-bench-") as tmp:
        store = SqliteStore(Path(tmp) / "replay.db")
        with ScriptedModelServer(script(turns), model="scripted") as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="scripted")
            with Runtime(
                store, RuntimeSettings(model=settings, new_id=lambda: f"id-{next(ids)}")
            ) as runtime:
                session = runtime.start_session()
                started = time.perf_counter()
                for i in range(turns):
                    assert session.run(f"question {i}", timeout=60).ok
                live = time.perf_counter() - started
                session.close()
        events = len(store.read(session.session_id))
        started = time.perf_counter()
        result = replay(store, session.session_id)
        replayed = time.perf_counter() - started
        assert result.ok, result.divergence and result.divergence.message()
        store.close()
    requests = turns + turns // 10
    typical = requests * TYPICAL_REPLY_SEC
    lines: list[Line] = [
        ("tasks / model requests / events", f"{turns} / {requests} / {events}", "", "", ""),
        (
            "whole session, s",
            f"{replayed:.2f}",
            f"{live:.2f}",
            f"{live / replayed:.0f}x",
            ">= 100x",
        ),
        ("per task, ms", f"{replayed / turns * 1000:.2f}", f"{live / turns * 1000:.2f}", "", ""),
        (
            f"live at {TYPICAL_REPLY_SEC:g} s a reply (typical), s",
            f"{replayed:.2f}",
            f"{typical:.0f}",
            f"{typical / replayed:.0f}x",
            ">= 100x",
        ),
    ]
    table(
        f"replaying a {turns}-task session (SQLite, every tenth task with a tool call)",
        lines,
        "ours: replay (no server); raw: live against ScriptedModelServer with "
        f"{CHUNK_DELAY * 1000:g} ms between chunks",
    )


if __name__ == "__main__":
    main()
