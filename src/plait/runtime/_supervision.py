"""Supervision: a session that broke stops in this process, and nobody waits for it.

When an actor's handling raises, or the store fails a write, the journal is sealed and the
session's host is told (``Journal.on_lost``). Its drop-out (``SessionHost.lose``) then fails
every waiter at once (feeds, ``run``, acknowledgements), stops the actors and servers, and
records what it can: the running task's end, ``TurnAborted(failed, error)``, with its open calls
answered; nothing if the store is what failed. The session is left as a crash leaves it: resumed
from its log (docs/failures.md#supervision). A lost lease goes the same way, recording nothing,
and so does a store that stayed away longer than it is waited for (``StoreUnavailableError``):
the session is lost here, not failed, its lease left to lapse for whoever takes it up once the
store is back (docs/failures.md#the-store-blinks). This module holds what that procedure decides
with: what ends a failed task, and whether an error means the store went away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from plait._errors import (
    PlaitError,
    SessionFailedError,
    StoreUnavailableError,
)
from plait.events import (
    AgentMessageDelta,
    Event,
    ModelResponded,
    NewEvent,
    Transient,
    TurnAborted,
)
from plait.runtime._recovery import running_ended

__all__ = [
    "STOP_SEC",
    "Unrecorded",
    "failure_end",
    "went_away",
]

log = logging.getLogger("plait")

STOP_SEC = 10.0
"""How long a failed session's actors and servers are given to stop."""


def went_away(error: PlaitError) -> bool:
    """Whether ``error`` is the store staying away past its tolerated outage (a write that
    could not be made): the session is lost, as to another process, not failed."""
    return isinstance(error, SessionFailedError) and isinstance(error.cause, StoreUnavailableError)


def failure_end(past: Sequence[Event], error: SessionFailedError) -> list[NewEvent]:
    """What ends the task ``past`` shows running when its session failed (nothing, if none
    runs): its open calls' answers (``unknown`` for a call that may have run), then
    ``TurnAborted(failed, error)`` saying what broke."""
    cause = " ".join(f"{type(error.cause).__name__}: {error.cause}".split())
    detail = f"the session failed: {error.actor}, handling {error.handling}, raised {cause}"
    return running_ended(past, TurnAborted("failed", "error", detail))


class Unrecorded:
    """Follows a live feed for what it showed that the log does not hold: the text streamed in
    a conversation since its last recorded reply. Call it with each item (as ``on_item``)."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.text = ""
        """What was streamed of a reply that was not recorded (yet)."""

    def then(
        self, show: Callable[[Event | Transient], object]
    ) -> Callable[[Event | Transient], None]:
        """An ``on_item`` that follows the item, then has ``show`` show it."""

        def follow(item: Event | Transient) -> None:
            self(item)
            show(item)

        return follow

    def __call__(self, item: Event | Transient) -> None:
        if getattr(item, "conversation_id", None) != self.conversation_id:
            return
        if isinstance(item, AgentMessageDelta):
            self.text += item.text
        elif isinstance(item, Event) and isinstance(item.body, ModelResponded | TurnAborted):
            self.text = ""
