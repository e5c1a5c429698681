"""A session's life in one process: its states and the transitions between them.

A session handle is in exactly one ``State``; only the named transitions of ``TRANSITIONS``
move it, and a transition from a state it does not leave is an ``IllegalTransitionError``
naming both. ``Life`` holds the state and the facts that go with it: why the session ended
here, whether its drop-out has finished, and until when its place is held for a command on
its way. docs/processes.md#a-sessions-life draws the same table (``diagram()``; a test
holds the two equal).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from plait._machines import drawn, moved

if TYPE_CHECKING:
    from plait._errors import PlaitError

__all__ = ["TRANSITIONS", "Life", "State", "diagram"]


class State(enum.Enum):
    """Where a session is in this process."""

    FOLLOWED = "followed"
    """Another process owns it: its commands go to that owner's inbox, its events are read;
    this process takes it over once its lease is free (``Runtime.resume``)."""
    WATCHED = "watched"
    """Followed, never taken over here (``Runtime.follow``)."""
    STARTING = "starting"
    """Owned here; its actors are starting, in a place the runtime gave it."""
    ACTIVE = "active"
    """Owned here; its actors run."""
    PASSIVE = "passive"
    """Owned here (its lease held); its actors are stopped and hold no place and no threads."""
    DRAINING = "draining"
    """It takes no more work; what runs is given a grace period, then it is handed back."""
    CLOSING = "closing"
    """Its close interrupted what runs; its actors are stopping and its close is recorded."""
    CLOSED = "closed"
    """Closed, or handed back: this process does nothing more for it."""
    FAILED = "failed"
    """An actor broke or the store failed a write: stopped here, to resume from its log."""
    LOST = "lost"
    """Another process took its lease: stopped here, recording nothing."""

    @property
    def owned(self) -> bool:
        """Whether this process holds it (by a lease) and may start its actors."""
        return self in _OWNED

    @property
    def ended(self) -> bool:
        """Whether this handle is done with it (closed, handed back, failed or lost)."""
        return self in _ENDED

    @property
    def followed(self) -> bool:
        """Whether another process owns it (followed or watched)."""
        return self in _FOLLOWED


# Tuples, not sets: the diagram lists them in this order in every process.
_FOLLOWED = (State.FOLLOWED, State.WATCHED)
_OWNED = (State.STARTING, State.ACTIVE, State.PASSIVE)
_ENDED = (State.CLOSED, State.FAILED, State.LOST)
_RUNNING = (*_OWNED, State.DRAINING, State.CLOSING)

TRANSITIONS: Mapping[str, Mapping[State, State]] = {
    "own": {State.PASSIVE: State.STARTING},
    "take_over": {State.FOLLOWED: State.PASSIVE},
    "follow": {State.PASSIVE: State.FOLLOWED},
    "watch": {State.FOLLOWED: State.WATCHED},
    "activate": {State.STARTING: State.ACTIVE},
    "passivate": {State.STARTING: State.PASSIVE, State.ACTIVE: State.PASSIVE},
    "drain": {s: State.DRAINING for s in _OWNED},
    "hand_back": {s: State.CLOSED for s in (State.DRAINING, *_FOLLOWED)},
    "close": {**{s: State.CLOSING for s in _OWNED}, **{s: State.CLOSED for s in _FOLLOWED}},
    "closed": {State.CLOSING: State.CLOSED},
    "fail": {s: State.FAILED for s in _RUNNING},
    "lose": {s: State.LOST for s in _RUNNING},
}
"""Each transition by name: the states it leaves, and where each goes."""


class Life:
    """One session's state in this process, and the facts that go with it; ``move`` (or
    ``end``) is the only way to change the state (from any thread: each move is atomic)."""

    def __init__(self, session_id: str, state: State) -> None:
        self.session_id = session_id
        self._state = state
        self._lock = threading.Lock()
        self._why: PlaitError | None = None
        self._dropping: threading.Event | None = None
        self._held_until = 0.0  # monotonic

    @property
    def state(self) -> State:
        """Where the session is now."""
        return self._state

    @property
    def why(self) -> PlaitError | None:
        """Why it ended here, when it failed, was lost, or cannot be taken over."""
        return self._why

    def can(self, transition: str) -> bool:
        """Whether ``transition`` leaves the current state."""
        return self._state in TRANSITIONS[transition]

    def move(self, transition: str) -> State:
        """Take ``transition``; return the new state. Raise ``IllegalTransitionError`` (naming
        the transition and the state) when it does not leave the current state."""
        with self._lock:
            self._state = moved(
                TRANSITIONS,
                transition,
                self._state,
                "session",
                lambda: f"session {self.session_id}",
            )
            return self._state

    def move_if_can(self, transition: str) -> bool:
        """Take ``transition`` if it leaves the current state; return whether it did. For the
        moves that race a session's failure on another thread (supervision's drop-out), which
        may have ended it first."""
        with self._lock:
            target = TRANSITIONS[transition].get(self._state)
            if target is not None:
                self._state = target
            return target is not None

    def end(self, transition: str, why: PlaitError) -> bool:
        """``fail`` or ``lose`` because of ``why`` (kept: the first reason stays); return
        whether it moved (not once it had ended)."""
        with self._lock:
            target = TRANSITIONS[transition].get(self._state)
            if target is None:
                return False
            self._why = self._why or why
            self._state = target
            return True

    # --- its drop-out, and a place held ----------------------------------------------------

    def dropping(self) -> threading.Event:
        """Begin a drop-out (``fail`` or ``lose`` on a thread of its own): the event it sets
        once it has stopped the actors."""
        self._dropping = threading.Event()
        return self._dropping

    def wait_dropped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a drop-out that began to finish; return whether
        one began."""
        dropping = self._dropping
        if dropping is not None:
            dropping.wait(timeout)
        return dropping is not None

    def hold(self, sec: float) -> None:
        """Hold its place for ``sec`` seconds more (``0``: no longer) for a command on its way
        (docs/processes.md#capacity)."""
        self._held_until = time.monotonic() + sec if sec > 0 else 0.0

    @property
    def held(self) -> bool:
        """Whether its place is held for a command on its way."""
        return time.monotonic() < self._held_until


def diagram() -> str:
    """The transitions as a Mermaid state diagram (docs/processes.md#a-sessions-life)."""
    return drawn(TRANSITIONS)


if __name__ == "__main__":
    print(diagram())
