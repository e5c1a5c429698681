"""``Offload``: runs asyncio callers' short blocking calls on a thread of the runtime's own.

An asyncio caller of a session (``arun``, ``asubmit``) must not hold up its loop while a submit
takes the session's lock or a passive session's actors start from its log; a thousand callers
that come at once would otherwise stall the loop for all of that time. Handing the call to a
thread costs the loop a future and a queue put; the thread runs the calls in the order they
came and resolves each future on its caller's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import TypeVar, cast

__all__ = ["Offload"]

T = TypeVar("T")

_Done = Callable[[object, BaseException | None], object]
"""Told the call's result, or what it raised."""

_Item = tuple[Callable[[], object], _Done]
"""A call, and whom to tell how it went."""


class Offload:
    """One thread, started at the first call, that runs calls handed to it from event loops."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[[], object], _Done] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def __call__(self, call: Callable[[], T]) -> T:
        """Return ``call()``, run on the thread; its exception, raised here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def done(result: object, error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, cast(T, result), error)

        self._put(call, done)
        return await future

    def send(self, call: Callable[[], object], failed: Callable[[BaseException], object]) -> None:
        """Run ``call`` on the thread, in turn, without waiting for it; what it raises goes to
        ``failed``."""
        self._put(call, lambda _, error: None if error is None else failed(error))

    def _put(self, call: Callable[[], object], done: _Done) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        self._queue.put((call, done))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            call, done = item
            try:
                result, error = call(), None
            except BaseException as exc:  # handed to the caller, whatever it is
                result, error = None, exc
            done(result, error)

    def close(self) -> None:
        """Run what was handed over, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()


def _settle(future: asyncio.Future[T], result: T, error: BaseException | None) -> None:
    if future.done():  # its caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
