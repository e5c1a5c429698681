"""``PerEventStore``: a store that keeps a row per event (encodings 1 and 2).

This is where a store whose rows are events (``Row``: ``(position, data, hash, stream, seq,
type, v)``) reads them: it provides ``_rows`` and ``_all_rows`` (and ``_settled_rows``), and
``PerEventStore`` decodes and checks them for ``EventStore``'s reads
(docs/event-log.md#checked-reads).
"""

from __future__ import annotations

from abc import abstractmethod

from plait.events.checks import Placed, first_gap
from plait.events.codec import GENESIS_HASH, decode_rows
from plait.events.rows import Row
from plait.events.store import EventStore
from plait.events.stored import PER_EVENT, Stored
from plait.events.types import Event

__all__ = ["PerEventStore"]


class PerEventStore(EventStore):
    """An ``EventStore`` whose rows are events."""

    def _window(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        resolve_blobs: bool,
        check: bool,
    ) -> tuple[list[Event], bytes | None]:
        rows = self._rows(stream, after, upto, limit)
        return self._decode_all(rows, resolve_blobs, check), None

    def _hash_at(self, stream: str, seq: int) -> bytes:
        before = self._rows(stream, seq - 1, seq, 1) if seq else []
        return before[0][2] if before else GENESIS_HASH

    def _all_events(
        self, after_position: int, limit: int | None, resolve_blobs: bool, settled: bool
    ) -> list[Event]:
        rows = (self._settled_rows if settled else self._all_rows)(after_position, limit)
        return self._decode_all(rows, resolve_blobs)

    def _position_gap(self) -> tuple[int, int] | None:
        """The first place where positions are not dense from 1: the position before it (0
        if it is the first) and the next one stored; ``None`` if there is none. (Here by
        reading every row; a database backend asks its database.)"""
        return first_gap(self._placed)

    def _placed(self, after_position: int, limit: int) -> list[Placed]:
        return [(row[0], row[3], row[4]) for row in self._all_rows(after_position, limit)]

    def as_stored(self, stream: str) -> Stored:
        return Stored(PER_EVENT, self._rows(stream, 0, None, None), self._head(stream), self._blob)

    def _decode_all(self, rows: list[Row], resolve_blobs: bool, check: bool = True) -> list[Event]:
        """The events of ``rows``, each checked (unless not ``check``), their blobs read
        (``resolve_blobs``)."""
        return self._resolving(lambda hold: decode_rows(rows, hold, check=check), resolve_blobs)

    @abstractmethod
    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Row]:
        """Return a stream's rows with ``after < seq <= upto`` in seq order, their columns as
        the rows hold them (not as an index repeats them)."""

    @abstractmethod
    def _all_rows(self, after_position: int, limit: int | None) -> list[Row]:
        """Return rows of all streams after ``after_position`` in position order."""

    def _settled_rows(self, after_position: int, limit: int | None) -> list[Row]:
        """Return rows as ``_all_rows`` does, but only those no later commit can precede."""
        return self._all_rows(after_position, limit)
