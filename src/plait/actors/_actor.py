"""``Actor``: the pykka thread actor every actor of plait is.

Its inbox is a ``queue.SimpleQueue`` rather than pykka's default ``queue.Queue``: the same FIFO
(``put``, ``get``, ``empty`` are all pykka asks of it) without the locks and conditions of a
bounded queue, so a message costs less to send and take, and an idle actor holds fewer objects
for the garbage collector to walk (a service keeps thousands of sessions' actors).

An exception is not left to pykka, which would end the actor's thread (silently, if it was
raised in ``on_start``) and leave whoever waits on it waiting, or answered ``ActorDeadError``.
Wherever it escapes (the actor's start, its handling of a message, or anything pykka reports
to ``on_failure``) the actor reports it (``failed``) and its whole session stops in this
process, every waiter told why (docs/failures.md#supervision). So a subclass starts in
``startup`` and handles messages in ``receive``: this class keeps pykka's hooks.
"""

from __future__ import annotations

import logging
import queue
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pykka

from plait._errors import SessionFailedError

if TYPE_CHECKING:
    from plait.actors._seams import JournalLike

__all__ = ["Actor", "handled"]

log = logging.getLogger("plait")


class Actor(pykka.ThreadingActor):
    """A pykka ``ThreadingActor`` with a light inbox, supervised by its session."""

    journal: JournalLike
    """The journal of the session it belongs to, which a failure stops."""

    # Python joins non-daemon threads before it runs ``atexit``: a program that never closed
    # its runtime would wait on its actors for ever. The runtime hands its sessions back at
    # exit instead (docs/processes.md#a-program-that-ends-without-close).
    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:  # pykka's envelope type is private
        return queue.SimpleQueue()

    def startup(self) -> None:
        """Start, on its own thread, before it takes any message."""

    def receive(self, message: object) -> object:
        """Handle ``message``; what it returns answers an ask."""
        return None

    def role(self, message: object) -> str:
        """What a failure handling ``message`` (``None``: not a message) names as broken."""
        raise NotImplementedError

    def answer_failed(self, message: object, error: Exception) -> object:
        """What an ask of ``message`` is answered when ``error`` escaped its handling."""
        return None

    def on_start(self) -> None:
        try:
            self.startup()
        except Exception as exc:  # it goes on answering: the session stops it
            self.failed(None, exc, "its start")

    def on_receive(self, message: object) -> object:
        try:
            return self.receive(message)
        except Exception as exc:
            self.failed(message, exc)
            return self.answer_failed(message, exc)

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # What pykka caught itself (a proxy call told, or a failure's own report raised):
        # this actor is stopped already.
        if isinstance(exception_value, Exception):
            self.failed(None, exception_value, "a message")

    def failed(self, message: object, error: Exception, handling: str | None = None) -> None:
        """Stop this actor's session: ``error`` escaped its handling of ``message`` (or of
        what ``handling`` says). Its callers get a ``SessionFailedError`` naming what broke
        (``role``), what it handled and ``error``; once the session is being stopped, nothing
        is done."""
        what = handling or handled(message)
        journal, actor = self.journal, self.role(message)
        log.debug("session %s: %s failed handling %s", journal.stream, actor, what, exc_info=error)
        journal.fail(SessionFailedError(journal.stream, actor, what, error))


def handled(message: object) -> str:
    """A message as a failure names it: its type, and the task or call it is about."""
    plan = getattr(message, "plan", None)
    task = getattr(message, "task_id", None) or getattr(plan, "task_id", None)
    call = getattr(message, "call_id", None)
    about = [f"{key} {value}" for key, value in (("task", task), ("call", call)) if value]
    name = type(message).__name__
    return f"{name} ({', '.join(about)})" if about else name
