"""``PreparedAppend``: an append encoded and chained, before any backend writes it.

A store prepares an append inside its write transaction, after reading the stream's head. A
stream's only writer (a session's journal) knows the head already: it prepares the append
itself, folds the events at once, and has them written after (``EventStore.append_prepared``),
so what it does next need not wait for the fsync (docs/event-log.md#writing-ahead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from plait.events.packing import PackedRow, pack
from plait.events.types import Event

__all__ = ["PreparedAppend"]


class PreparedAppend(NamedTuple):
    """An append encoded and chained, ready for the backend to write in one transaction."""

    rows: list[tuple[int, str, int, bytes, bytes]]
    """``(seq, type, v, data, hash)`` per event."""
    events: list[Event]
    """The events as the caller will see them (position filled in after the write)."""
    blobs: dict[str, bytes]
    """Blob content by hex sha-256."""

    def placed(self, first_position: int) -> list[Event]:
        """Return the events, numbered from ``first_position`` in global order."""
        for offset, event in enumerate(self.events):
            msgspec.structs.force_setattr(event, "position", first_position + offset)
        return self.events

    def packed(self) -> PackedRow:
        """The append as its row keeps it (encoding 3): its entries compressed together, after
        the hash its first event follows, up to its last event's."""
        last = self.rows[-1]
        return pack(last[0], self.events[0].prev_hash, [row[3] for row in self.rows], last[4])

    @staticmethod
    def joined(appends: Sequence[PreparedAppend]) -> PreparedAppend:
        """``appends`` of one stream, each following the one before, as one append."""
        if len(appends) == 1:
            return appends[0]
        blobs: dict[str, bytes] = {}
        for append in appends:
            blobs.update(append.blobs)
        rows = [row for append in appends for row in append.rows]
        return PreparedAppend(rows, [e for append in appends for e in append.events], blobs)
