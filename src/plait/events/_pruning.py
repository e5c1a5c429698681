"""The records of pruned sessions, a part of every store (``EventStore.pruning``)
(docs/storage.md#retention): the sessions a prune removed, the positions they held, and the
removal itself.

A backend's part provides ``records``, ``_remove`` and, where it can give room back at once,
``_reclaim``. ``plait.events._retention`` decides what goes; the store's reads and ``verify``
ask the part whether a gap in positions is one a prune left (``covers``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from plait.events._pruned import PrunedPositions, PrunedSession

__all__ = ["Pruning"]


class Pruning(ABC):
    """Pruned sessions: their records, the positions they held, their removal."""

    def __init__(self) -> None:
        self._positions = PrunedPositions()
        """The positions pruned sessions held, as last read (``covers``)."""

    @abstractmethod
    def records(self, stream: str | None = None) -> list[PrunedSession]:
        """The records of the sessions a prune removed (``stream``'s only, if given), in the
        order they were pruned."""

    def remove(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> str:
        """In one transaction, remove the sessions ``records`` name, each only if its head is
        still the one its record names and no live process holds its lease (else raise:
        nothing removed): its events, head, lease and inbox; store the records; delete
        ``blobs``. Then give the room back where the backend can; return what to run to give
        it back otherwise ("": nothing). ``plait.events._retention.prune`` decides what goes."""
        self._remove(records, blobs)
        return self._reclaim()

    def covers(self, first: int, last: int) -> bool:
        """Whether positions ``first`` to ``last``, missing from a read, were held by pruned
        sessions: read again from the store before saying no (another process may have
        pruned since)."""
        if self._positions.covers(first, last):
            return True
        self._positions = PrunedPositions(self.records())
        return self._positions.covers(first, last)

    @abstractmethod
    def _remove(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        """What ``remove`` removes, in one transaction."""

    def _reclaim(self) -> str:
        """Give back the room a prune freed where the backend can now; return what to run to
        give it back otherwise ("": nothing)."""
        return ""
