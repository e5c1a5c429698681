"""Delivery: who hears what a session's journal records, and in what order.

Three kinds of readers: the actors that fold what the others record (``Listeners``,
``_listening.py``), the live feeds of the embedder (``_feed.py``: events, and the transient
notifications that are never stored), and, in a process that only follows the session, the
feeds again, with what the owner recorded (``Journal.deliver``). The journal hands each recorded
group here under ``lock``, once it is durable (or made, for the listeners), so every reader
sees the log in its order, and a feed that begins at a seq is handed exactly what follows it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from plait.actors._listening import Listeners
from plait.events import Event, Transient

if TYPE_CHECKING:
    from plait.actors._feed import Feed
    from plait.actors._refs import Recipient

__all__ = ["Delivery"]


class Delivery:
    """The listeners and live feeds of one session, and the lock its records are handed out
    under."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Held while a group is recorded and handed out, and while a feed begins."""
        self.listeners = Listeners()
        """The actors that fold what the others record, and what they have yet to take."""
        self._feeds: list[Feed] = []

    @property
    def wants_deltas(self) -> bool:
        """Whether a live feed takes transient notifications: if none does, a model call need
        not make its text deltas (a reader that subscribes later sees those after it)."""
        return any(feed.transient for feed in self._feeds)

    def keep(self, origin: Recipient | None, events: list[Event]) -> None:
        """Keep ``events`` (``origin`` recorded them) for the listeners; hold ``lock``."""
        self.listeners.keep(origin, events)

    def put(self, events: Iterable[Event]) -> None:
        """Hand durable ``events`` to every live feed; hold ``lock``."""
        for feed in self._feeds:
            for event in events:
                feed.put(event)

    def notice(self, notice: Transient) -> None:
        """Hand a transient notification to the feeds that take them (it is never stored)."""
        with self.lock:
            for feed in self._feeds:
                if feed.transient:
                    feed.put(notice)

    def add(self, feed: Feed) -> None:
        """Hand ``feed`` what is recorded from now on; hold ``lock`` (it began at a seq)."""
        self._feeds.append(feed)

    def remove(self, feed: Feed) -> None:
        """Hand ``feed`` nothing more."""
        with self.lock:
            if feed in self._feeds:
                self._feeds.remove(feed)

    def fail(self, error: Exception) -> None:
        """Tell every live feed's reader that the session is gone from this process."""
        with self.lock:
            for feed in self._feeds:
                feed.fail(error)
