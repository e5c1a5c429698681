"""``RuntimeSettings(max_active_sessions=)``: a cap on sessions with running actors; work waits
in order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from scripted import runtime_for

from plait import ConfigError, SqliteStore
from plait.events import Event, TaskCompleted, TaskStarted
from plait.replay import replay
from plait.testing import ScriptedModelServer, Step


def _first(events: list[Event], body: type) -> Event:
    return next(e for e in events if isinstance(e.body, body))


def test_idle_sessions_make_room_for_the_ones_that_need_it(tmp_path: Path) -> None:
    steps = [Step(text=f"answer {i}") for i in range(10)]
    with (
        ScriptedModelServer(steps) as server,
        runtime_for(server, tmp_path, max_active_sessions=2) as runtime,
    ):
        sessions = [runtime.start_session() for _ in range(5)]
        assert runtime.active_sessions == 2
        assert [s.passive for s in sessions] == [True, True, True, False, False]
        answers = [
            s.run(f"q{i}", timeout=30).last_assistant_message for i, s in enumerate(sessions)
        ]
        assert answers == [f"answer {i}" for i in range(5)]
        assert runtime.active_sessions == 2
        assert [s.passive for s in sessions] == [True, True, True, False, False]
        # Each answers its next task, however often it was passivated for another.
        again = [s.run("again", timeout=30).last_assistant_message for s in sessions]
        assert again == [f"answer {i}" for i in range(5, 10)]
        ids = [s.session_id for s in sessions]
    with SqliteStore(tmp_path / "plait.db") as store:
        for session_id in ids:  # passivated and started again, each replays as it ran
            result = replay(store, session_id, timeout=10)
            assert result.ok, result.divergence and result.divergence.message()


async def test_a_task_waits_for_a_place_in_order_and_never_blocks_the_loop(
    tmp_path: Path,
) -> None:
    # The busy ones end a second apart, so the places free one at a time: the waiting tasks
    # start in the order they came, and each asks the model in turn.
    slow = Step(text="slow " * 10, chunk_chars=5, chunk_delay=0.05)
    slower = Step(text="slow " * 10, chunk_chars=5, chunk_delay=0.15)
    steps = [slow, slower, Step(text="third"), Step(text="fourth")]
    with (
        ScriptedModelServer(steps) as server,
        runtime_for(server, tmp_path, max_active_sessions=2) as runtime,
    ):
        sessions = [runtime.start_session() for _ in range(4)]
        busy = [asyncio.create_task(s.arun("long", timeout=60)) for s in sessions[2:]]
        await asyncio.to_thread(server.wait_for_requests, 2)
        third = asyncio.create_task(sessions[0].arun("third", timeout=60))
        fourth = asyncio.create_task(sessions[1].arun("fourth", timeout=60))
        ticks = 0

        async def tick() -> None:  # counts the loop's turns while the tasks wait
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.create_task(tick())
        outcomes = await asyncio.wait_for(asyncio.gather(*busy, third, fourth), 60)
        ticker.cancel()
        assert [o.last_assistant_message for o in outcomes[2:]] == ["third", "fourth"]
        assert all(o.ok for o in outcomes) and ticks > 1
        logs = [runtime.store.read(s.session_id) for s in sessions]
        first_end = min(_first(log, TaskCompleted).position for log in logs[2:])
        waited = [_first(log, TaskStarted).position for log in logs[:2]]
        assert first_end < waited[0] < waited[1]  # started once a place freed, in order
        assert runtime.active_sessions == 2


def test_a_thread_that_needs_a_place_waits_for_a_busy_session_to_finish(tmp_path: Path) -> None:
    slow = Step(text="slow " * 10, chunk_chars=5, chunk_delay=0.05)
    with (
        ScriptedModelServer([slow, Step(text="then me")]) as server,
        runtime_for(server, tmp_path, max_active_sessions=1) as runtime,
    ):
        busy = runtime.start_session()
        busy.submit("long")
        server.wait_for_requests(1)
        answered: list[str | None] = []
        waiter = threading.Thread(
            target=lambda: answered.append(
                runtime.start_session().run("next", timeout=60).last_assistant_message
            )
        )
        waiter.start()
        waiter.join(60)
        assert answered == ["then me"]
        assert busy.passive  # it made the place once its task ended


def test_the_cap_must_be_at_least_one(tmp_path: Path) -> None:
    with ScriptedModelServer([]) as server, pytest.raises(ConfigError, match="at least 1"):
        runtime_for(server, tmp_path, max_active_sessions=0)
