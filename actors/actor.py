"""``Actor``: the pykka thread actor every actor of plait is.

Its inbox is a ``queue.SimpleQueue`` rather than pykka's default ``queue.Queue``: the same FIFO
(``put``, ``get``, ``empty`` are all pykka asks of it) without the locks and conditions of a
bounded queue, so a message costs less to send and take, and an idle actor holds fewer objects
for the garbage collector to walk (a service keeps thousands of sessions' actors).

An exception an actor's handling lets out is not left to pykka, which would end that actor's
thread and leave whoever waits on it waiting: the actor reports it (``failed``) and its whole
session stops in this process, every waiter told why (docs/failures.md#supervision).
"""

from __future__ import annotations

import logging
import queue
from typing import Any

import pykka

from plait.errors import SessionFailedError

__all__ = ["Actor", "handled"]

log = logging.getLogger("plait")


class Actor(pykka.ThreadingActor):
    """A pykka ``ThreadingActor`` with a light inbox, supervised by its session."""

    @staticmethod
    def _create_actor_inbox() -> queue.SimpleQueue[Any]:
        return queue.SimpleQueue()

    def failed(self, journal: Any, actor: str, message: Any, error: Exception) -> None:
        """Stop the session whose ``journal`` this actor records through: ``error`` escaped its
        handling of ``message``. Its callers get a ``SessionFailedError`` naming ``actor`` (what
        broke), the message and ``error``; once the session is being stopped, nothing is done."""
        what = handled(message)
        log.debug("session %s: %s failed handling %s", journal.stream, actor, what, exc_info=error)
        journal.fail(SessionFailedError(journal.stream, actor, what, error))


def handled(message: Any) -> str:
    """A message as a failure names it: its type, and the task or call it is about."""
    plan = getattr(message, "plan", None)
    task = getattr(message, "task_id", None) or getattr(plan, "task_id", None)
    call = getattr(message, "call_id", None)
    about = [f"{key} {value}" for key, value in (("task", task), ("call", call)) if value]
    name = type(message).__name__
    return f"{name} ({', '.join(about)})" if about else name
