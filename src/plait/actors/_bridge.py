"""``Promise``: the one bridge from plain threads to asyncio code.

A value (or an error) that one thread settles, once, and that anyone waits for: a thread with
``wait`` (and a timeout), asyncio code by awaiting the promise, on a future of its own loop,
so a waiting coroutine holds no thread (a thousand waiting ``arun`` cost their memory, not a
thousand threads; ``asyncio.to_thread`` would cap them at the default executor's few
workers). Settling is safe from any thread and only the first settle counts; an asyncio
waiter whose loop has closed is skipped, as nobody waits there any more.

This is an internal type of plait, not part of its public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Generator
from typing import Any, Generic, TypeVar, cast

__all__ = ["Promise"]

T = TypeVar("T")


class Promise(Generic[T]):
    """One value or error, settled from any thread, waited for by threads and coroutines."""

    # Slots: one is made per submission and per wake-up of an asyncio feed reader.
    __slots__ = ("_error", "_event", "_futures", "_lock", "_settled", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settled = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._event: threading.Event | None = None  # made for the first thread that waits
        self._futures: list[asyncio.Future[None]] = []  # asyncio waiters, on their loops

    @property
    def settled(self) -> bool:
        """Whether it has its value or error (a waiter then has it at once)."""
        return self._settled

    def settle(self, value: T) -> bool:
        """Give it ``value``; return whether this was the first word (later ones are dropped)."""
        return self._set(value, None)

    def fail(self, error: BaseException) -> bool:
        """Give it ``error``, raised to every waiter; return whether this was the first word."""
        return self._set(None, error)

    def cancel(self) -> bool:
        """Cancel it: its waiters get ``asyncio.CancelledError`` (an asyncio waiter is
        cancelled); return whether this was the first word."""
        return self._set(None, asyncio.CancelledError())

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until it is settled; return whether it is (``False``: ``timeout``
        seconds passed first)."""
        with self._lock:
            if self._settled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def result(self) -> T:
        """Return its value, or raise its error (it is settled: ``wait`` said so)."""
        if self._error is not None:
            raise self._error
        return cast(T, self._value)

    def __await__(self) -> Generator[Any, None, T]:
        """Wait for it on the running loop, holding no thread; return its value or raise its
        error."""
        return self._arrived().__await__()

    async def _arrived(self) -> T:
        if not self._settled:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            with self._lock:
                waits = not self._settled
                if waits:
                    self._futures.append(future)
            if waits:
                try:
                    await future
                finally:  # cancelled or timed out: the settler need not wake it
                    if not future.done() or future.cancelled():
                        with self._lock, contextlib.suppress(ValueError):
                            self._futures.remove(future)
        return self.result()

    def _set(self, value: T | None, error: BaseException | None) -> bool:
        with self._lock:
            if self._settled:
                return False
            self._value, self._error, self._settled = value, error, True
            event, futures, self._futures = self._event, self._futures, []
        if event is not None:
            event.set()
        for future in futures:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                future.get_loop().call_soon_threadsafe(_wake, future)
        return True


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # its waiter was cancelled meanwhile
        future.set_result(None)
