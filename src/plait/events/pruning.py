"""The retention part of the store contract (docs/storage.md#retention): the records of the
sessions a prune removed, the gaps in positions they account for, and the removal itself.

``EventStore`` inherits it; a backend provides ``_pruned_records``, ``_remove_sessions`` and,
where it can give room back at once, ``_reclaim``, and lists gaps its own faster way
(``_position_gaps``). ``plait.events.retention`` decides what goes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from plait.errors import StoreError
from plait.events.checks import Placed, Verification, position_gap, position_gaps
from plait.events.pruned import PrunedPositions, PrunedSession

if TYPE_CHECKING:
    from plait.events.proof import Proof

__all__ = ["Pruning"]


class Pruning(ABC):
    """Pruned sessions: their records, the gaps they account for, their removal."""

    _pruned_positions = PrunedPositions()
    """The positions pruned sessions held, as last read (``_accounted``); each store object
    replaces it with its own."""

    def pruned(self, stream: str | None = None) -> list[PrunedSession]:
        """The records of the sessions a prune removed (``stream``'s only, if given), in the
        order they were pruned."""
        return self._pruned_records(stream)

    def remove_pruned(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> str:
        """In one transaction, remove the sessions ``records`` name, each only if its head is
        still the one its record names and no live process holds its lease (else raise:
        nothing removed): its events, head, lease and inbox; store the records; delete
        ``blobs``. Then give the room back where the backend can; return what to run to give
        it back otherwise ("": nothing). ``plait.events.retention.prune`` decides what goes."""
        self._remove_sessions(records, blobs)
        return self._reclaim()

    def _accounted(self, first: int, last: int) -> bool:
        """Whether positions ``first`` to ``last``, missing from a read, were held by pruned
        sessions: read again from the store before saying no (another process may have
        pruned since)."""
        if self._pruned_positions.covers(first, last):
            return True
        self._pruned_positions = PrunedPositions(self.pruned())
        return self._pruned_positions.covers(first, last)

    def _pruned_report(self, stream: str, proof: Proof) -> Verification | None:
        """What ``verify`` says of ``stream`` if a prune removed it (``None``: none did): its
        record, and the witness's head of it checked against it."""
        if self._head(stream)[0] != 0:
            return None
        records = self.pruned(stream)
        if not records:
            return None
        return proof.pruned(Verification(stream, True, 0, pruned=records[-1]), records[-1])

    def _whole(self, report: Verification) -> Verification:
        """``report``, of a stream found good, with what the whole store's positions say: the
        first gap no pruned session accounts for, or how many sessions were pruned."""
        records = self.pruned()
        gap = self._position_gap()
        if gap is not None:
            self._pruned_positions = pruned = PrunedPositions(records)
            gaps = [gap] if not pruned.covers(gap[0] + 1, gap[1] - 1) else self._position_gaps()
            for before, after in gaps:
                if not pruned.covers(before + 1, after - 1):
                    return position_gap(report, before, self._placed(before, 1)[0])
        if not records:
            return report
        events = sum(record.events for record in records)
        return msgspec.structs.replace(report, pruned_sessions=len(records), pruned_events=events)

    def _position_gaps(self) -> list[tuple[int, int]]:
        """Every place where positions are not dense from 1, as ``_position_gap`` gives the
        first (a prune leaves one per run of positions it removed)."""
        return list(position_gaps(self._placed))

    def _pruned_records(self, stream: str | None) -> list[PrunedSession]:
        """The records (``stream``'s only, if given), oldest first."""
        return []

    def _remove_sessions(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        """What ``remove_pruned`` removes, in one transaction."""
        raise StoreError(f"{type(self).__name__} cannot prune sessions")

    def _reclaim(self) -> str:
        """Give back the room a prune freed where the backend can now; return what to run to
        give it back otherwise ("": nothing)."""
        return ""

    @abstractmethod
    def _head(self, stream: str) -> tuple[int, bytes]: ...

    @abstractmethod
    def _placed(self, after_position: int, limit: int) -> list[Placed]:
        """Where the events after ``after_position`` are (position, stream, seq), in position
        order, as their rows say, unchecked: what a gap report names."""

    @abstractmethod
    def _position_gap(self) -> tuple[int, int] | None: ...
