"""A session's journal: the one writer of its stream, and who hears what it records.

Every actor of a session records through the journal. It is two jobs, each in its own module:
``writer.py`` (``Writer``) appends in order, fenced by the lease epoch, writes ahead, seals,
reloads after a takeover, stops the session when the store refuses, and folds the task queue;
``delivery.py`` (``Delivery``) keeps what was recorded for the actors that fold it and hands it
to the live feeds with the transient notifications that are never stored, or, in a process that
follows the session, what its owner recorded. ``Journal`` is the writer with its delivery: one
object for the actors, the session's host and replay to hold.

What the owner of the session wants to hear (``on_idle``, ``on_lost``) and asks (``may_act``)
is given when the journal is made, never set later (``SessionHost`` makes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from plait.actors.delivery import Delivery
from plait.actors.feed import DEFAULT_FEED_LIMIT, Feed, Kinds
from plait.actors.listening import Listeners
from plait.actors.writer import Writer
from plait.errors import PlaitError
from plait.events.signing import Signer
from plait.events.store import EventStore
from plait.events.types import Event, Transient

__all__ = ["Journal"]


class Journal(Writer):
    """Appends a session's events in order and tells whoever folds or follows them."""

    def __init__(
        self,
        store: EventStore,
        stream: str,
        past: Sequence[Event] = (),
        epoch: int | None = None,
        *,
        on_idle: Callable[[], object] | None = None,
        on_lost: Callable[[PlaitError], object] | None = None,
        may_act: Callable[[], bool] | None = None,
        signer: Signer | None = None,
    ) -> None:
        """Write after ``past`` with lease ``epoch`` (``None``: not fenced); the callbacks and
        ``signer`` are ``Writer``'s (none: nobody is told, the feeds fail by themselves, it
        may always act, no head is signed)."""
        self._delivery = Delivery()
        super().__init__(
            store,
            stream,
            past,
            epoch,
            self._delivery,
            on_idle=on_idle,
            on_lost=on_lost,
            may_act=may_act,
            signer=signer,
        )

    @property
    def listeners(self) -> Listeners:
        """The actors that fold what the others record, and what they have yet to take."""
        return self._delivery.listeners

    @property
    def wants_deltas(self) -> bool:
        """Whether a live feed takes transient notifications: if none does, a model call need
        not make its text deltas (a reader that subscribes later sees those after it)."""
        return self._delivery.wants_deltas

    def deliver(self, events: Sequence[Event]) -> None:
        """Hand the feeds events another process recorded (this one follows the session)."""
        self.follow(events)

    def fail_feeds(self, error: Exception) -> None:
        """Tell every live feed's reader that the session is gone from this process."""
        self._delivery.fail(error)

    def publish(self, notice: Transient) -> None:
        """Hand a transient notification to the live feeds (it is never stored)."""
        self._delivery.notice(notice)

    def feed(
        self, transient: bool = True, limit: int = DEFAULT_FEED_LIMIT, kinds: Kinds | None = None
    ) -> Feed:
        """Return a live feed of what is recorded from now on, holding at most ``limit`` items
        its reader has not taken.

        Transient notifications are handed to it too, unless ``transient`` is false; events
        only of ``kinds``, if given.
        """
        with self._delivery.lock:  # it begins at the last seq, and is handed what follows
            feed = Feed(self, transient, limit, kinds)
            self._delivery.add(feed)
        return feed

    def unsubscribe(self, feed: Feed) -> None:
        """Stop handing ``feed`` what is recorded (its ``close``)."""
        self._delivery.remove(feed)
