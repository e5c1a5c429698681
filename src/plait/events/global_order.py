"""Every stream in one order: reads across streams, and the live tail that follows them.

``EventStore`` inherits it; a backend provides ``_all_events`` and ``_last_position`` and, where
positions are not in commit order (PostgreSQL), ``dense_positions``
(docs/event-log.md#streams-seq-and-position).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING

from plait.events.checks import Links
from plait.events.subscription import Subscription, Waiter

if TYPE_CHECKING:
    from plait.events.types import Event

__all__ = ["GlobalOrder"]

_BATCH = 500
"""The most events a subscription reads at a time."""


class GlobalOrder(ABC):
    """Reads of every stream in global order, checked as they go, and subscriptions."""

    dense_positions = True
    """Whether positions run from 1 without a gap but where a prune removed sessions, so a
    jump is a row lost (docs/event-log.md#streams-seq-and-position)."""

    def read_all(
        self,
        after_position: int = 0,
        *,
        limit: int | None = 1000,
        resolve_blobs: bool = True,
        settled: bool = False,
    ) -> list[Event]:
        """Return events of every stream after ``after_position``, in global order (each
        checked against its hash, its columns, its link to the one before it in the same read
        and its position: after the one before, right after where positions are dense).
        ``settled``: only those no commit to
        come can precede, so that a reader going on after the last never misses one (where
        positions are not in commit order: docs/event-log.md#streams-seq-and-position)."""
        events = self._all_events(after_position, limit, resolve_blobs, settled)
        Links(after_position, self._accounted, dense=self.dense_positions).check(events)
        return events

    def iter_all(
        self, after_position: int = 0, *, batch: int = 2000, resolve_blobs: bool = True
    ) -> Iterator[Event]:
        """Iterate over every stored event in global order, reading ``batch`` at a time."""
        for events in self.batches(after_position, batch=batch, resolve_blobs=resolve_blobs):
            yield from events

    def batches(
        self, after_position: int = 0, *, batch: int = 2000, resolve_blobs: bool = True
    ) -> Iterator[list[Event]]:
        """Iterate over every stored event in global order as lists of up to ``batch``
        (the fastest way to rebuild a projection: ``projection.fold(events, state)`` each)."""
        links = Links(after_position, self._accounted, dense=self.dense_positions)
        while True:
            events = self._all_events(after_position, batch, resolve_blobs, False)
            links.check(events)
            if events:
                yield events
            if len(events) < batch:
                return
            after_position = events[-1].position

    def last_position(self) -> int:
        """Return the global position of the last event stored (0: none); of the last one
        settled (``read_all``), where positions are not in commit order."""
        return self._last_position()

    # --- live tails -------------------------------------------------------------------------

    def subscribe(self, from_position: int = 0) -> Subscription:
        """Return a live iterator over every event after ``from_position``, each exactly once."""
        return Subscription(self._settled_batch, from_position, self._waiter(), self._read_whole)

    def _settled_batch(self, after_position: int) -> list[Event]:
        """What a subscription reads at a time: settled events after ``after_position``."""
        return self.read_all(after_position, limit=_BATCH, settled=True)

    def _read_whole(self, batch: list[Event]) -> bool:
        """Whether a subscription's read of ``batch`` found all there was to hand out."""
        return len(batch) < _BATCH and not self._held_back()

    def _held_back(self) -> bool:
        """Whether the last settled read left committed events above the bound (where
        positions are not in commit order)."""
        return False

    @abstractmethod
    def _all_events(
        self, after_position: int, limit: int | None, resolve_blobs: bool, settled: bool
    ) -> list[Event]:
        """Return events of every stream after ``after_position`` in position order, at most
        ``limit``, each row checked as it is read; ``settled``: only those no later commit
        can precede."""

    @abstractmethod
    def _last_position(self) -> int:
        """Return the last position stored, 0 when there is none."""

    @abstractmethod
    def _accounted(self, first: int, last: int) -> bool: ...

    @abstractmethod
    def _waiter(self) -> Waiter: ...
