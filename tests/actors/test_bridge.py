"""The thread-to-asyncio bridge: a ``Promise`` a thread settles and threads and coroutines await."""

from __future__ import annotations

import asyncio
import threading

import pytest

from plait import PlaitError
from plait.actors import Promise

WAIT_SEC = 10.0


def settle_from_a_thread(
    promise: Promise[int], value: int, go: threading.Event
) -> threading.Thread:
    def run() -> None:
        go.wait(WAIT_SEC)
        promise.settle(value)

    thread = threading.Thread(target=run, name="settler", daemon=True)
    thread.start()
    return thread


async def test_a_thread_waiter_and_an_asyncio_waiter_both_get_what_a_thread_settled() -> None:
    promise: Promise[int] = Promise()
    go = threading.Event()
    heard: list[int] = []

    def wait_in_a_thread() -> None:
        if promise.wait(WAIT_SEC):
            heard.append(promise.result())

    waiter = threading.Thread(target=wait_in_a_thread, daemon=True)
    waiter.start()
    settler = settle_from_a_thread(promise, 7, go)
    awaited = asyncio.ensure_future(promise)  # waits on the loop, before it is settled
    await asyncio.sleep(0)  # one turn of the loop: it waits
    assert not awaited.done()
    go.set()
    async with asyncio.timeout(WAIT_SEC):
        assert await awaited == 7
    settler.join(WAIT_SEC)
    waiter.join(WAIT_SEC)
    assert heard == [7]
    assert await promise == 7  # settled: at once, as often as asked


def test_settling_twice_keeps_the_first_word() -> None:
    promise: Promise[str] = Promise()
    assert promise.settle("first")
    assert not promise.settle("second")
    assert not promise.fail(PlaitError("late"))
    assert not promise.cancel()
    assert promise.wait(0) and promise.result() == "first"


async def test_an_error_reaches_every_waiter() -> None:
    promise: Promise[None] = Promise()
    failed: list[BaseException] = []

    def wait_in_a_thread() -> None:
        promise.wait(WAIT_SEC)
        try:
            promise.result()
        except PlaitError as exc:
            failed.append(exc)

    waiter = threading.Thread(target=wait_in_a_thread, daemon=True)
    waiter.start()
    awaited = asyncio.ensure_future(promise)
    await asyncio.sleep(0)  # one turn of the loop: it waits
    threading.Thread(target=promise.fail, args=(PlaitError("session s1 seq 4: broke"),)).start()
    with pytest.raises(PlaitError, match="seq 4"):
        async with asyncio.timeout(WAIT_SEC):
            await awaited
    waiter.join(WAIT_SEC)
    assert [str(e) for e in failed] == ["session s1 seq 4: broke"]


async def test_cancelling_cancels_an_asyncio_waiter() -> None:
    promise: Promise[int] = Promise()
    awaited = asyncio.ensure_future(promise)
    await asyncio.sleep(0)  # one turn of the loop: it waits
    threading.Thread(target=promise.cancel).start()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(WAIT_SEC):
            await awaited
    assert awaited.cancelled()


def test_a_thread_waiter_times_out_when_nobody_settles() -> None:
    assert not Promise[int]().wait(0.01)


async def test_a_timed_out_asyncio_waiter_leaves_nothing_behind() -> None:
    promise: Promise[int] = Promise()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await promise
    assert promise.settle(1)  # nobody is woken; nothing fails
    assert await promise == 1


def test_settling_when_the_waiters_loop_is_closed_is_harmless() -> None:
    promise: Promise[int] = Promise()
    loop = asyncio.new_event_loop()

    async def start_waiting() -> asyncio.Future[int]:
        awaited = asyncio.ensure_future(promise)
        await asyncio.sleep(0)  # one turn of the loop: it waits
        return awaited

    awaited = loop.run_until_complete(start_waiting())
    loop.close()  # its waiter is still registered
    assert promise.settle(3)
    assert promise.wait(0) and promise.result() == 3
    assert not awaited.done()
