"""``PerAppendStore``: a store that keeps a row per append (encoding 3): every store, in
memory, SQLite or PostgreSQL.

A row holds an append's events (``plait.events._stored.Packed``): a backend fetches whole rows
(``_rows``, ``_all_rows``) and ``PerAppendStore`` decodes and checks each, and keeps the
events it was asked for. A window of a stream also fetches the row holding the seq it starts
after, whose hash the window's first event must follow (docs/event-log.md#checked-reads).
"""

from __future__ import annotations

from abc import abstractmethod

from plait.events._checks import Placed
from plait.events._codec import GENESIS_HASH
from plait.events._store import EventStore
from plait.events._stored import PER_APPEND, Packed, Stored, decode_packed
from plait.events._types import Event

__all__ = ["PerAppendStore", "beyond", "holding", "window"]


class PerAppendStore(EventStore):
    """An ``EventStore`` whose rows are appends, of encoding 3 (``plait.events._packing``)."""

    def _window(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        resolve_blobs: bool,
        check: bool,
    ) -> tuple[list[Event], bytes | None]:
        # One row more than events asked for: the first may hold only seqs up to ``after``.
        rows = self._rows(stream, after, upto, None if limit is None else limit + 1)
        if limit is not None:  # those that hold the first ``limit`` events after it only
            rows = holding(rows, after, limit)
        return window(self._decode(rows, resolve_blobs, check), after, upto, limit)

    def _hash_at(self, stream: str, seq: int) -> bytes:
        events = self._decode(self._rows(stream, seq, seq, 1), False) if seq else []
        return next((e.hash for e in events if e.seq == seq), GENESIS_HASH)

    def _all_events(
        self, after_position: int, limit: int | None, resolve_blobs: bool, settled: bool
    ) -> list[Event]:
        rows = self._all_rows(after_position, limit, settled)
        return beyond(self._decode(rows, resolve_blobs), after_position, limit)

    def _placed(self, after_position: int, limit: int) -> list[Placed]:
        rows = self._all_rows(after_position, limit, False)
        placed = [
            (position + i, stream, seq - count + 1 + i)
            for position, stream, seq, count, *_ in rows
            for i in range(count)
        ]
        return [p for p in placed if p[0] > after_position][:limit]

    def as_stored(self, stream: str) -> Stored:
        return Stored(
            PER_APPEND, self._rows(stream, 0, None, None), self._head(stream), self.blobs.state
        )

    def _decode(self, rows: list[Packed], resolve_blobs: bool, check: bool = True) -> list[Event]:
        """The events of ``rows``, each row checked (unless not ``check``), their blobs read
        (``resolve_blobs``)."""
        return self._resolving(lambda hold: decode_packed(rows, hold, check=check), resolve_blobs)

    @abstractmethod
    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Packed]:
        """Return the rows of ``stream`` holding seqs ``after`` to ``upto`` (the row holding
        ``after`` too), at most ``limit``, in seq order, their columns as the rows hold them
        (not as an index repeats them)."""

    @abstractmethod
    def _all_rows(self, after_position: int, limit: int | None, settled: bool) -> list[Packed]:
        """Return the rows of every stream holding positions after ``after_position`` (the row
        holding it too), in position order, up to those holding the first ``limit`` events
        after it (found by the rows' columns, not by fetching more: a row may hold a thousand);
        ``settled``: only those no later commit can precede."""


def holding(rows: list[Packed], after: int, limit: int, *, positions: bool = False) -> list[Packed]:
    """The first of ``rows`` (a stream's in seq order, or with ``positions`` any streams' in
    position order) that hold ``limit`` events after seq (position) ``after``, by their
    columns alone: a row is decoded only if it is read."""
    kept: list[Packed] = []
    found = 0
    for row in rows:
        count = row[3]
        last = row[0] + count - 1 if positions else row[2]
        found += max(0, min(count, last - after))
        kept.append(row)
        if found >= limit:
            break
    return kept


def window(
    events: list[Event], after: int, upto: int | None, limit: int | None
) -> tuple[list[Event], bytes | None]:
    """``events`` (a stream's, in seq order) with ``after < seq <= upto``, at most ``limit``,
    and the hash of seq ``after`` if they hold it."""
    before = next((e.hash for e in events if e.seq == after), None)
    kept = [e for e in events if e.seq > after and (upto is None or e.seq <= upto)]
    return (kept if limit is None else kept[:limit]), before


def beyond(events: list[Event], position: int, limit: int | None) -> list[Event]:
    """``events`` (in position order) after ``position``, at most ``limit``."""
    kept = [e for e in events if e.position > position]
    return kept if limit is None else kept[:limit]
