"""``Ack``: a submission's caller, told once its task is in the log (or why it is not).

A submit returns only what is durable: its ``TaskEnqueued`` (docs/event-log.md#durability).
The session's actor records it and calls the ``Ack`` the ``Enqueue`` carried; a thread waits
for that on an event, asyncio code on a future of its loop (no thread held). A session stopped
before its actor took the message fails the ``Ack``s it left, so nobody waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from plait.errors import PlaitError

__all__ = ["ACK_WAIT_SEC", "Ack"]

ACK_WAIT_SEC = 60.0
"""How long a submit waits for its task to be recorded before it says so."""


class Ack:
    """One submission's acknowledgement: ``None`` once durable, or the error that stopped it."""

    def __init__(self, pending: set[Ack], loop: asyncio.AbstractEventLoop | None = None) -> None:
        """``pending``: where its session keeps the ``Ack``s its actors have not answered (it
        leaves once answered). With ``loop``: awaited there; without: waited for by a thread."""
        self._pending = pending
        self.task_id = ""
        """The id of the task it acknowledges, once made."""
        self._said = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._loop = loop
        self.future: asyncio.Future[None] | None = None if loop is None else loop.create_future()

    def __call__(self, error: BaseException | None = None) -> None:
        """Say how it went (the first word counts); from any thread."""
        with self._said:
            if self._done.is_set():
                return
            self._error = error
            self._done.set()
        self._pending.discard(self)
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._settle)

    def wait(self, timeout: float, what: str) -> None:
        """Return once durable; raise the error that stopped it, or after ``timeout`` s."""
        if not self._done.wait(timeout):
            raise PlaitError(f"{what} was not recorded within {timeout:g} s")
        if self._error is not None:
            raise self._error

    async def arrived(self) -> None:
        """``wait`` for asyncio code (an ``Ack`` made with the running loop)."""
        assert self.future is not None
        await self.future

    def _settle(self) -> None:
        future = self.future
        if future is None or future.done():  # its caller was cancelled
            return
        if self._error is not None:
            future.set_exception(self._error)
        else:
            future.set_result(None)
