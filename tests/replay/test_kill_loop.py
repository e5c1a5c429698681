"""``kill -9`` a process that submits and runs tasks, again and again; nothing acknowledged is lost.

This is ``bench/kill_loop.py``'s loop with three kills per store instead of fifty, on SQLite and
on a PostgreSQL schema of its own. Each round a process takes over three sessions and submits
tasks to them, printing each id ``submit`` returned; every task calls ``side_effect``, a function
tool that is not idempotent. The bench kills at a random time; here each kill lands at an event
the test waits for: just after the process's first acknowledged id, one or two ids later, or as
its next tool call starts (between the effect and the record of its result). Then what a user
would check (docs/replay.md, "Crashes"): tasks were acknowledged, each is in the log once and
ended once, no call of ``side_effect`` ran twice, and every session verifies and replays clean.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from support import StoreFactory, load_bench

from plait.events import Subscription, ToolCallStarted

KILLS = 3
SEED = 7
WAIT_SEC = 30.0
"""How long a kill waits for its event (a busy machine takes seconds to start a process)."""


kill_loop = load_bench("kill_loop")


class AtEvents:
    """The moments of the kills: round ``i`` waits for the process's first acknowledged id,
    then kills at once, after one or two more ids (drawn from the seeded ``rng``), or at the
    next ``ToolCallStarted`` in ``tail``, in turn."""

    def __init__(self, tail: Subscription) -> None:
        self._tail = tail
        self.chosen: list[str] = []
        """Each round's moment, for the failure message."""

    def __call__(self, child: Any, rng: random.Random) -> None:
        kind = len(self.chosen) % 3
        more = rng.randint(1, 2) if kind == 1 else 0
        self.chosen.append(
            ["its first id", f"{more} ids after its first", "its next tool call's start"][kind]
        )
        if not child.wait_acknowledged(1 + more, WAIT_SEC):
            self._missed(child, f"acknowledged id {1 + more}")
        elif kind == 2:
            while self._tail.get(timeout=0) is not None:  # stored already: wait for a new call
                pass
            deadline = time.monotonic() + WAIT_SEC
            while child.process.poll() is None and (left := deadline - time.monotonic()) > 0:
                event = self._tail.get(timeout=min(left, 1.0))
                if event is not None and isinstance(event.body, ToolCallStarted):
                    return
            self._missed(child, "tool call started")

    def _missed(self, child: Any, what: str) -> None:
        """Fail if the process is alive but ``what`` did not come; if it ended, return:
        ``run_store`` says so, with its stderr."""
        if child.process.poll() is None:
            raise AssertionError(
                f"kill {len(self.chosen)}/{KILLS}: no {what} within {WAIT_SEC:.0f} s; "
                f"the process's stderr:\n{child.errors()}"
            )


def test_three_kills_lose_nothing_acknowledged_and_run_no_call_twice(
    durable_stores: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every acknowledged task is in the log once and ended once, no call of the tool that is
    not idempotent ran twice, and every session verifies and replays clean."""
    store = durable_stores.open()  # the file, or the schema (dropped after the test)
    url = durable_stores.url
    monkeypatch.setenv(kill_loop.EFFECTS_ENV, "")  # run_store points it at its file; undone after
    with store.subscribe() as tail:
        moments = AtEvents(tail)
        row = kill_loop.run_store(
            durable_stores.backend, url, KILLS, random.Random(SEED), tmp_path, moments
        )
    shown = f"seed {SEED}; kills at {'; '.join(moments.chosen)}\n{kill_loop.table([row])}"
    assert row.kills == KILLS and row.acknowledged > 0, shown
    failures = {
        "lost": row.lost,
        "duplicate enqueues": row.duplicate_enqueues,
        "not ended once": row.unended,
        "run twice": row.duplicates,
        "verify failures": row.verify_failures,
        "replay failures": row.replay_failures,
    }
    assert failures == dict.fromkeys(failures, 0), shown
