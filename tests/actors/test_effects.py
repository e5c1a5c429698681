"""The effect loop runs coroutines on its own thread; cancel and close reach them there."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator

import pytest

from plait._errors import EffectLoopClosedError
from plait.actors import EffectLoop

WAIT = 5.0  # seconds: a bound on waiting for something that should happen at once


@pytest.fixture
def effects() -> Iterator[EffectLoop]:
    loop = EffectLoop()
    yield loop
    loop.close()


async def _stuck(started: threading.Event, finished: threading.Event) -> None:
    """Wait for an event that never fires, saying when it starts and when its finally runs."""
    try:
        started.set()
        await asyncio.Event().wait()
    finally:
        finished.set()


def test_results_come_back_from_the_loop_thread(effects: EffectLoop) -> None:
    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert effects.submit(where()).result(WAIT) == "plait-effects"
    assert effects.loop.is_running()


def test_exceptions_come_back(effects: EffectLoop) -> None:
    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        effects.submit(fail()).result(WAIT)


def test_cancelling_the_future_cancels_the_coroutine(effects: EffectLoop) -> None:
    started, finished = threading.Event(), threading.Event()
    future = effects.submit(_stuck(started, finished))
    assert started.wait(WAIT)

    assert future.cancel()

    assert finished.wait(WAIT), "the coroutine's finally did not run"
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(WAIT)


def test_close_cancels_pending_work_and_is_idempotent() -> None:
    effects = EffectLoop()
    runs = [(threading.Event(), threading.Event()) for _ in range(3)]
    futures = [effects.submit(_stuck(started, finished)) for started, finished in runs]
    assert all(started.wait(WAIT) for started, _ in runs)

    effects.close()
    effects.close()

    assert all(finished.is_set() for _, finished in runs)
    assert all(future.cancelled() for future in futures)
    assert not effects.loop.is_running()
    assert effects.closed


def test_submit_after_close_is_refused() -> None:
    effects = EffectLoop()
    effects.close()

    async def never() -> None:
        raise AssertionError("ran after close")

    with pytest.raises(EffectLoopClosedError, match="closed"):
        effects.submit(never())


def test_close_from_the_loop_thread_is_refused(effects: EffectLoop) -> None:
    async def close_from_inside() -> None:
        effects.close()

    with pytest.raises(RuntimeError, match="own thread"):
        effects.submit(close_from_inside()).result(WAIT)
