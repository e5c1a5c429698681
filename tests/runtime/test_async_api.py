"""The asyncio API waits on the event feed itself: no worker thread per waiting task."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scripted import runtime_for

from plait import SessionClosedError
from plait.events import AgentMessageDelta, Event, TaskCompleted, TurnAborted
from plait.testing import ScriptedModelServer, Step


class RefusingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A loop's default executor that fails whatever is run on it (``asyncio.to_thread``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{fn!r} was sent to a worker thread")


async def test_many_tasks_wait_at_once_without_worker_threads(tmp_path: Path) -> None:
    sessions = 40
    steps = [Step(text=f"answer {i}", chunk_chars=4, chunk_delay=0.01) for i in range(sessions)]
    asyncio.get_running_loop().set_default_executor(RefusingExecutor())
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        handles = [runtime.start_session() for _ in range(sessions)]
        outcomes = await asyncio.gather(
            *(handle.arun(f"question {i}", timeout=60) for i, handle in enumerate(handles))
        )
        assert all(outcome.ok for outcome in outcomes)
        answers = sorted(outcome.last_assistant_message or "" for outcome in outcomes)
        assert answers == sorted(f"answer {i}" for i in range(sessions))


async def test_a_feed_is_read_with_async_for_and_a_task_interrupted(tmp_path: Path) -> None:
    steps = [Step(text="word " * 300, chunk_chars=5, chunk_delay=0.01), Step(text="after")]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        seen: list[Any] = []
        async with session.subscribe() as feed:
            task = await session.asubmit("talk")
            async for item in feed:
                seen.append(item)
                if isinstance(item, AgentMessageDelta):
                    await session.ainterrupt()
                if isinstance(item, Event) and isinstance(item.body, TurnAborted | TaskCompleted):
                    break
        ended = seen[-1]
        assert ended.task_id == task and isinstance(ended.body, TurnAborted)
        assert ended.body.cause == "user"
        assert (await session.arun("again", timeout=30)).last_assistant_message == "after"
        await session.aclose()
        await session.aclose()  # closing twice is harmless
        events = runtime.store.read(session.session_id)
        assert type(events[-1].body).__name__ == "SessionClosed"


async def test_aclose_interrupts_a_running_task_and_records_the_close(tmp_path: Path) -> None:
    steps = [Step(text="long " * 400, chunk_chars=5, chunk_delay=0.01)]
    with ScriptedModelServer(steps) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        async with session.subscribe() as feed:
            await session.asubmit("talk")
            async for item in feed:
                if isinstance(item, AgentMessageDelta):
                    break
        await session.aclose(timeout=10)
        kinds = [type(e.body).__name__ for e in runtime.store.read(session.session_id)]
        aborted = [
            e.body
            for e in runtime.store.read(session.session_id)
            if isinstance(e.body, TurnAborted)
        ]
        assert [(a.reason, a.cause) for a in aborted] == [("interrupted", "close")]
        assert kinds[-1] == "SessionClosed"


async def test_a_submit_that_must_wait_for_the_session_does_not_hold_up_the_loop(
    tmp_path: Path,
) -> None:
    with (
        ScriptedModelServer([Step(text="done")]) as server,
        runtime_for(server, tmp_path) as runtime,
    ):
        session = runtime.start_session()
        ticked = asyncio.Event()
        async with session.subscribe(transient=False) as feed:
            with runtime.sessions.hosts[session.session_id].lock:  # another thread's call holds it
                submitted = asyncio.create_task(session.asubmit("go"))
                asyncio.get_running_loop().call_later(0.01, ticked.set)
                await asyncio.wait_for(ticked.wait(), 30)  # the loop ran on meanwhile
                assert not submitted.done()
            task_id = await asyncio.wait_for(submitted, 30)
            async for item in feed:
                if isinstance(item, Event) and isinstance(item.body, TaskCompleted | TurnAborted):
                    break
            assert (item.task_id, type(item.body)) == (task_id, TaskCompleted)


async def test_a_submit_to_a_closed_session_raises_in_its_caller(tmp_path: Path) -> None:
    with ScriptedModelServer([]) as server, runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        await session.aclose()
        with pytest.raises(SessionClosedError, match=session.session_id):
            await session.asubmit("go")
