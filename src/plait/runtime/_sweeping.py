"""``Sweeping``: a runtime's deletion of ``ttl`` content as it comes due (docs/storage.md).

It scans the store only once a session with ``ttl`` content is in use here: a runtime whose
sessions keep none never reads the store for it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from plait._errors import PlaitError
from plait.events import EventStore, Expiry
from plait.runtime._timers import Timer, Timers

__all__ = ["Sweeping"]

log = logging.getLogger("plait")


class Sweeping:
    """Sweeps a store's due ``ttl`` content every ``every_sec`` once started."""

    def __init__(self, store: EventStore, timers: Timers, every_sec: float | None) -> None:
        """``every_sec``: ``None`` sweeps only when asked (``sweep``)."""
        self._expiry = Expiry(store)
        self._timers = timers
        self._every_sec = every_sec
        self.timer: Timer | None = None
        """The job that sweeps, once ``ttl`` content is in use."""

    def sweep(self, now: datetime | None = None) -> int:
        """Delete the content due by ``now`` (the store's clock by default); return how many
        blobs."""
        return self._expiry.sweep(now)

    def start(self) -> None:
        """Start sweeping (once): ``ttl`` content is in use."""
        if self.timer is None and self._every_sec is not None:
            self.timer = self._timers.every(
                self._every_sec, self._scheduled, "expire ttl content", first=0.0
            )

    def _scheduled(self) -> None:
        try:
            self._expiry.sweep()
        except PlaitError as exc:  # a store error now; the next sweep tries again
            log.warning("expiring ttl content failed: %s", exc)
