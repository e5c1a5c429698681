"""Randomly scripted sessions through the real runtime: whatever the model does, the log stays
consistent — valid histories, one task at a time, every task ended once, an intact chain, and
live projections equal to a rebuild from the log. The suite runs 50; ``bench/random_sessions.py``
runs the same check on as many as it is asked for (1,000 by default)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

from scripted import assert_histories_valid, assert_ids, random_script

from plait.actors import ModelSettings
from plait.events import (
    Event,
    SqliteStore,
    TaskCompleted,
    TaskStarted,
    TurnAborted,
)
from plait.events.projections import (
    TASKS,
    AuditProjection,
    ContextsProjection,
    HistoryProjection,
    Projection,
    TaskQueue,
    TaskQueueProjection,
    TimelineProjection,
    TokensProjection,
    conversation_index,
)
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer

SESSIONS = 50
SEED = 20261123


def assert_one_task_at_a_time(events: list[Event]) -> None:
    state = TaskQueue()
    started: dict[str, int] = {}
    ended: dict[str, int] = {}
    for event in events:
        if isinstance(event.body, TaskStarted):
            assert state.running is None, f"seq {event.seq}: a task starts while one runs"
            started[event.task_id or ""] = event.seq
        if isinstance(event.body, TaskCompleted | TurnAborted):
            assert event.task_id not in ended, f"seq {event.seq}: task {event.task_id} ended twice"
            ended[event.task_id or ""] = event.seq
        TASKS.apply(state, event)
    assert set(started) == set(ended), "every started task ends exactly once"


def assert_rebuilds_agree(events: list[Event], cut: int) -> None:
    projections: list[Projection[Any]] = [
        HistoryProjection(),
        TokensProjection(),
        AuditProjection(),
        TimelineProjection(),
        TaskQueueProjection(),
        ContextsProjection(),
    ]
    for projection in projections:
        resumed = projection.load(projection.save(projection.fold(events[:cut])))
        assert projection.fold(events[cut:], resumed) == projection.fold(events)


def check_random_sessions(count: int, seed: int, path: Path) -> tuple[int, int]:
    """Run ``count`` sessions, each scripted at random from ``seed``, in the SQLite store at
    ``path``, and assert each one's log consistent; return how many tasks completed and how
    many failed on the model's errors."""
    rng = random.Random(seed)
    store = SqliteStore(path)
    counter = itertools.count(1)
    failures = completions = 0
    for number in range(count):
        with ScriptedModelServer(random_script(rng)) as server:
            settings = ModelSettings(
                base_url=server.base_url, api_key="test", backoff_sec=0.001, max_attempts=2
            )
            with Runtime(
                store, RuntimeSettings(model=settings, new_id=lambda: f"id-{next(counter)}")
            ) as runtime:
                session = runtime.start_session()
                outcome = session.run(f"session {number}", timeout=60)
                completions += outcome.ok
                failures += outcome.status == "model_error"
                index = session.conversations()
                live = {info.id: session.history(info.id) for info in index}
                session.close()
        events = store.read(session.session_id)
        assert store.verify(session.session_id).ok
        assert_histories_valid(events)
        assert_one_task_at_a_time(events)
        assert_ids(events)
        rebuilt = HistoryProjection().fold(events)  # what the actor held is the log's fold
        assert index == conversation_index(rebuilt)
        assert live == {
            cid: [m.to_openai() for m in conv.messages]
            for cid, conv in rebuilt.conversations.items()
        }
        assert_rebuilds_agree(events, rng.randint(0, len(events)))
    store.close()
    return completions, failures


def test_random_scripted_sessions_keep_the_log_consistent(tmp_path: Path) -> None:
    completions, failures = check_random_sessions(SESSIONS, SEED, tmp_path / "random.db")
    assert completions > SESSIONS // 4 and failures > 0  # the scripts reach both ends
