"""``Offload``: runs asyncio callers' short blocking calls on a thread of the runtime's own.

An asyncio caller of a session (``arun``, ``asubmit``) must not hold up its loop while a submit
takes the session's lock or a passive session's actors start from its log; a thousand callers
that come at once would otherwise stall the loop for all of that time. Handing the call to a
thread costs the loop a future and a queue put; the thread runs the calls in the order they
came and settles each caller's ``Promise``, which it awaits on its loop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar, cast

from plait.actors import Promise

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
        promise: Promise[T] = Promise()

        def done(result: object, error: BaseException | None) -> None:
            if error is not None:
                promise.fail(error)
            else:
                promise.settle(cast(T, result))

        self._put(call, done)
        return await promise

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
