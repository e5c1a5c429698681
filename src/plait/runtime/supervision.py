"""Supervision: a session that broke stops in this process, and nobody waits for it.

When an actor's handling raises, or the store fails a write, the journal is sealed and the
session's handle is told (``Journal.on_lost``). ``drop_out`` then fails every waiter at once
(feeds, ``run``, acknowledgements), stops the actors and servers, and records what it can: the
running task's end, ``TurnAborted(failed, error)``, with its open calls answered; nothing if the
store is what failed. The session is left as a crash leaves it: resumed from its log
(docs/failures.md#supervision). A lost lease goes the same way, recording nothing, and so does
a store that stayed away longer than it is waited for (``StoreUnavailableError``): the session
is lost here, not failed, its lease left to lapse for whoever takes it up once the store is
back (docs/failures.md#the-store-blinks).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from plait.errors import (
    LeaseLostError,
    PlaitError,
    SessionFailedError,
    StoreError,
    StoreUnavailableError,
)
from plait.events.types import (
    AgentMessageDelta,
    Event,
    ModelResponded,
    NewEvent,
    Transient,
    TurnAborted,
)
from plait.runtime.recovery import running_ended

if TYPE_CHECKING:
    from plait.runtime.host import SessionHost

__all__ = [
    "STOP_SEC",
    "Unrecorded",
    "drop_out",
    "failure_end",
    "start_drop_out",
    "went_away",
]

log = logging.getLogger("plait")

STOP_SEC = 10.0
"""How long a failed session's actors and servers are given to stop."""


def start_drop_out(host: SessionHost, error: PlaitError) -> None:
    """Run ``drop_out`` on a thread of its own (the actor that broke may be the caller: it
    cannot wait for itself to stop); the host knows when it is done before it starts, so a
    ``close`` that follows a waiter woken by it waits for it."""
    done = host.dropping = threading.Event()

    def run() -> None:
        try:
            drop_out(host, error)
        finally:
            done.set()

    # A daemon: a library never keeps the process alive (docs/processes.md#stopping).
    threading.Thread(target=run, name="plait-dropped", daemon=True).start()


def drop_out(host: SessionHost, error: PlaitError) -> None:
    """Stop ``host``'s session in this process (``fail``, or ``lose`` to another process):
    every waiter gets ``error``."""
    runtime, sid, journal = host.runtime, host.session_id, host.journal
    failed = isinstance(error, SessionFailedError) and not went_away(error)
    if not failed:  # another process took it, or may once the store is back: not ours
        runtime.owner.forget(sid)
    host.end("fail" if failed else "lose", error)  # what is asked from now on: refused
    journal.fail_feeds(error)  # at once, not after the actors stopped
    with host.lock:
        if host.actor is not None:
            host.stop_actors(STOP_SEC, error)
    if failed and isinstance(error, SessionFailedError):
        _record_end(host, error)
    host.forget()


def went_away(error: PlaitError) -> bool:
    """Whether ``error`` is the store staying away past its tolerated outage (a write that
    could not be made): the session is lost, as to another process, not failed."""
    return isinstance(error, SessionFailedError) and isinstance(error.cause, StoreUnavailableError)


def _record_end(host: SessionHost, error: SessionFailedError) -> None:
    """Record the running task's end, unless the store is what failed; give the lease back
    as a crash leaves it (``plait recover`` and ``resume`` take the session up from there)."""
    runtime, sid, journal = host.runtime, host.session_id, host.journal
    refused = journal.refusal or error.cause
    if isinstance(refused, StoreError):
        if isinstance(refused, StoreUnavailableError | LeaseLostError):
            runtime.owner.forget(sid)  # unreachable, or not ours: the lease lapses on its own
        else:
            # The store answered (another writer went first, a full disk): nothing more is
            # recorded, but the lease is given back as a crash leaves it, so the next owner
            # need not wait for it to lapse (a release that fails leaves it to lapse).
            runtime.owner.release(sid, idle=False)
        return
    try:
        ended = failure_end(runtime.store.read(sid), error)
        if ended:
            journal.record_last(ended)
    except PlaitError as exc:  # the store failed too: the log ends where it does
        log.info("session %s: its end was not recorded: %s", sid, exc)
        runtime.owner.forget(sid)
        return
    runtime.owner.release(sid, idle=False)


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
