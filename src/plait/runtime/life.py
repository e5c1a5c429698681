"""A session's life in one process: its states and the transitions between them.

A session handle is in exactly one ``State``; only the named transitions of ``TRANSITIONS``
move it, and a transition from a state it does not leave is an ``IllegalTransitionError``
naming both. docs/processes.md#a-sessions-life draws the same table (``diagram()``; a test
holds the two equal).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping

from plait.machines import drawn, moved

__all__ = ["TRANSITIONS", "Life", "State", "diagram"]


class State(enum.Enum):
    """Where a session is in this process."""

    FOLLOWED = "followed"
    """Another process owns it: its commands go to that owner's inbox, its events are read."""
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


# Tuples, not sets: the diagram lists them in this order in every process.
_OWNED = (State.STARTING, State.ACTIVE, State.PASSIVE)
_ENDED = (State.CLOSED, State.FAILED, State.LOST)
_RUNNING = (*_OWNED, State.DRAINING, State.CLOSING)

TRANSITIONS: Mapping[str, Mapping[State, State]] = {
    "own": {State.PASSIVE: State.STARTING},
    "take_over": {State.FOLLOWED: State.PASSIVE},
    "follow": {State.PASSIVE: State.FOLLOWED},
    "activate": {State.STARTING: State.ACTIVE},
    "passivate": {State.STARTING: State.PASSIVE, State.ACTIVE: State.PASSIVE},
    "drain": {s: State.DRAINING for s in _OWNED},
    "hand_back": {State.DRAINING: State.CLOSED, State.FOLLOWED: State.CLOSED},
    "close": {**{s: State.CLOSING for s in _OWNED}, State.FOLLOWED: State.CLOSED},
    "closed": {State.CLOSING: State.CLOSED},
    "fail": {s: State.FAILED for s in _RUNNING},
    "lose": {s: State.LOST for s in _RUNNING},
}
"""Each transition by name: the states it leaves, and where each goes."""


class Life:
    """One session's state in this process; ``move`` is the only way to change it (from any
    thread: each move is atomic)."""

    def __init__(self, session_id: str, state: State) -> None:
        self.session_id = session_id
        self._state = state
        self._lock = threading.Lock()

    @property
    def state(self) -> State:
        """Where the session is now."""
        return self._state

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


def diagram() -> str:
    """The transitions as a Mermaid state diagram (docs/processes.md#a-sessions-life)."""
    return drawn(TRANSITIONS)


if __name__ == "__main__":
    print(diagram())
