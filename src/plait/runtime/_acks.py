"""``Ack``: a submission's caller, told once its task is in the log (or why it is not).

A submit returns only what is durable: its ``TaskEnqueued`` (docs/event-log.md#durability).
The session's actor records it and calls the ``Ack`` the ``Enqueue`` carried; a thread waits
for that, asyncio code awaits it on its loop, holding no thread (a ``Promise``). A session
stopped before its actor took the message fails the ``Ack``s it left, so nobody waits for ever.
"""

from __future__ import annotations

from collections.abc import Callable

from plait._errors import PlaitError
from plait.actors import Promise

__all__ = ["ACK_WAIT_SEC", "Ack"]

ACK_WAIT_SEC = 60.0
"""How long a submit waits for its task to be recorded before it says so."""


class Ack:
    """One submission's acknowledgement: ``None`` once durable, or the error that stopped it."""

    def __init__(
        self, pending: set[Ack], then: Callable[[BaseException | None], object] | None = None
    ) -> None:
        """``pending``: where its session keeps the ``Ack``s its actors have not answered (it
        leaves once answered). ``then`` hears the first word too, on the thread that says it
        (a caller that does not wait: the owner's, for a command from the inbox)."""
        self._pending = pending
        self._then = then
        self.task_id = ""
        """The id of the task it acknowledges, once made."""
        self._said: Promise[None] = Promise()

    def __call__(self, error: BaseException | None = None) -> None:
        """Say how it went (the first word counts); from any thread."""
        first = self._said.settle(None) if error is None else self._said.fail(error)
        self._pending.discard(self)
        if first and self._then is not None:
            self._then(error)

    def wait(self, timeout: float, what: str) -> None:
        """Return once durable; raise the error that stopped it, or after ``timeout`` s."""
        if not self._said.wait(timeout):
            raise PlaitError(f"{what} was not recorded within {timeout:g} s")
        self._said.result()

    async def arrived(self) -> None:
        """``wait`` for asyncio code, on its loop."""
        await self._said
