"""The effect loop: one asyncio event loop, on its own daemon thread, for a runtime's I/O.

Actors are pykka threads and must never block on I/O, or an abort would wait behind a model
stream. They submit coroutines (model calls, MCP calls) here and get the outcome back as a
message, usually from a ``concurrent.futures.Future`` done-callback. Cancelling that future
cancels the coroutine on the loop, so an abort reaches in-flight I/O at once.

What the loop runs on threads (``asyncio.to_thread``: function tools, sync approvers, name
lookups) runs on daemon threads: one left blocked when the program ends must not keep it alive
(docs/processes.md#a-program-that-ends-without-close).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import TypeVar

from plait._errors import EffectLoopClosedError

__all__ = ["EffectLoop"]

T = TypeVar("T")


class EffectLoop:
    """Run coroutines on a private event loop thread named ``plait-effects``."""

    def __init__(self) -> None:
        """Create the loop and start its thread; it runs until :meth:`close`."""
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(_DaemonThreads())
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="plait-effects", daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop, for ``call_soon_threadsafe`` and the like."""
        return self._loop

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    def submit(self, coro: Coroutine[object, None, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; cancelling the returned future cancels the coroutine.

        Raises ``EffectLoopClosedError`` (and closes ``coro``) once the loop is closed.
        """
        with self._lock:
            if not self._closed:
                return asyncio.run_coroutine_threadsafe(coro, self._loop)
        coro.close()  # never awaited: close it so Python does not warn about it
        raise EffectLoopClosedError("the effect loop is closed; no more I/O can be started")

    def close(self, timeout: float = 5.0) -> None:
        """Cancel every task still running, wait up to ``timeout`` seconds, stop the thread.

        Idempotent. Tasks see ``CancelledError`` and their ``finally`` blocks run; their futures
        end cancelled. Must not be called from the loop's own thread.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("EffectLoop.close() called from the effect loop's own thread")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        drained = asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop)
        try:
            drained.result(timeout)
        except concurrent.futures.TimeoutError:
            drained.cancel()  # a task ignores cancellation: stop anyway, it is a daemon thread
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _cancel_all(self) -> None:
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._loop.shutdown_asyncgens()


class _DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The loop's executor: each call on a daemon thread of its own.

    A ``ThreadPoolExecutor``'s workers are not daemons, and Python joins them at exit (before
    ``atexit``), so a function tool or an approver still blocked would hold the process for
    as long as it blocks. asyncio takes only a ``ThreadPoolExecutor``: this is one by type,
    whose pool is never used.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(
        self, fn: Callable[..., T], /, *args: object, **kwargs: object
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller's to handle, as a pool's future holds it
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=run, name="plait-effects-call", daemon=True).start()
        return future
