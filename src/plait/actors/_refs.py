"""``Recipient`` and ``Askable``: an actor as the others address it (pykka's ``ActorRef``).

Messages, listeners, the writer and the seams all name it; it names nothing of theirs.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Askable", "Recipient"]


class Recipient(Protocol):
    """An actor as others tell it things (pykka's ``ActorRef``)."""

    @property
    def actor_urn(self) -> str:
        """The actor's unique id."""
        ...

    def tell(self, message: object) -> None:
        """Put ``message`` in its inbox; ``pykka.ActorDeadError`` once it is stopped."""
        ...

    def is_alive(self) -> bool:
        """Whether it is not stopped yet."""
        ...


class Askable(Recipient, Protocol):
    """An actor others also ask, waiting for its answer (pykka's ``ActorRef``)."""

    def ask(self, message: object, *, timeout: float | None = None) -> object:
        """Send ``message`` and wait up to ``timeout`` seconds for what its handling returns
        (pykka gives it no type: the caller knows what the message is answered with)."""
        ...
