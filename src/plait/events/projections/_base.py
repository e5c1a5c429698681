"""What a projection is: a deterministic fold ``(state, event) -> state``.

Projections never read the clock, make ids or do I/O: everything they show comes from events.
``apply`` owns the state it is given and may update it in place (a rebuild of a million events
must not copy a history per event); a state is a plain msgspec ``Struct`` so it can be saved and
folding can resume from the saved copy. Folding a log in one go and folding it in pieces from
saved states give the same state (a property test holds every projection to this).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from plait.events._types import Event

__all__ = ["Projection"]

S = TypeVar("S", bound=msgspec.Struct)


class Projection(ABC, Generic[S]):
    """A fold over events; subclasses map body types to handlers in ``handlers()``."""

    state_type: ClassVar[type[msgspec.Struct]]

    def __init__(self) -> None:
        self._handlers: dict[type[Any], Callable[[S, Event], None]] = self.handlers()

    @abstractmethod
    def initial(self) -> S:
        """Return the state before any event."""

    @abstractmethod
    def handlers(self) -> dict[type[Any], Callable[[S, Event], None]]:
        """Return the handler of each body type this projection cares about."""

    def apply(self, state: S, event: Event) -> S:
        """Fold one event into ``state`` and return the new state."""
        handler = self._handlers.get(type(event.body))
        if handler is not None:
            handler(state, event)
        return state

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        """Fold ``events`` into ``state`` (or the initial state)."""
        current = self.initial() if state is None else state
        handlers = self._handlers
        for event in events:
            handler = handlers.get(type(event.body))
            if handler is not None:
                handler(current, event)
        return current

    def save(self, state: S) -> bytes:
        """Encode a state, to resume folding later."""
        return msgspec.msgpack.encode(state)

    def load(self, data: bytes) -> S:
        """Decode a state saved by ``save``."""
        loaded: S = msgspec.msgpack.decode(data, type=self.state_type)  # type: ignore[assignment]
        return loaded
