"""What a prune leaves behind: one record per removed session, and the positions they held
(docs/storage.md#retention).

Positions are dense across the store, and every read across streams refuses a gap
(``checks.Links``). A prune removes whole sessions, so it makes gaps on purpose; it writes,
in the same transaction, a ``PrunedSession`` per session removed, naming the positions it held.
A gap is then accepted exactly where those records cover it; any other is still a row lost.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import msgspec

__all__ = ["COLUMNS", "PrunedPositions", "PrunedSession", "position_runs", "record_of", "row_of"]

Run = tuple[int, int]
"""Consecutive positions ``(first, last)``, both held."""


class PrunedSession(msgspec.Struct, frozen=True):
    """A session removed by a prune, as the store's ``pruned`` table records it."""

    stream: str
    """The session id."""
    last_seq: int
    """Its head's seq when it was removed."""
    last_hash: bytes
    """Its head's hash (sha-256 of the last event's stored bytes)."""
    events: int
    """How many events it held."""
    positions: tuple[Run, ...]
    """The global positions its events held, as runs ``(first, last)``."""
    last_at: datetime
    """When its last event was recorded (UTC)."""
    pruned_at: datetime
    """When it was removed (UTC)."""
    rule: str
    """The rule that removed it: ``closed-before 2026-01-01T00:00:00+00:00``..."""
    freed: int = 0
    """About how many bytes its rows and its own blobs took."""
    closed_at: datetime | None = None
    """When it was closed (its last ``SessionClosed``), if it was."""
    signed_seq: int = 0
    """The seq of the head its last ``HeadSigned`` signs (0: it was not signed)."""
    signed_hash: bytes = b""
    """That head's hash."""

    def line(self) -> str:
        """One line for people: when, by which rule, and its head."""
        return (
            f"session {self.stream} was pruned at {self.pruned_at.isoformat(timespec='seconds')} "
            f"({self.rule}): {self.events} events removed; its head was seq {self.last_seq} "
            f"sha256:{self.last_hash.hex()}"
        )


COLUMNS = (
    "stream, last_seq, last_hash, events, positions, last_at, pruned_at, rule, freed, "
    "closed_at, signed_seq, signed_hash"
)
"""The ``pruned`` table's columns (both backends), in the order of ``row_of``."""

_runs = msgspec.json.Decoder(tuple[tuple[int, int], ...]).decode


def row_of(record: PrunedSession) -> tuple[object, ...]:
    """``record`` as a row of ``COLUMNS``: positions as JSON runs, times as ISO 8601."""
    closed = None if record.closed_at is None else record.closed_at.isoformat()
    return (
        record.stream,
        record.last_seq,
        record.last_hash,
        record.events,
        msgspec.json.encode(record.positions).decode(),
        record.last_at.isoformat(),
        record.pruned_at.isoformat(),
        record.rule,
        record.freed,
        closed,
        record.signed_seq,
        record.signed_hash,
    )


def record_of(row: Sequence[Any]) -> PrunedSession:
    """The record a row of ``COLUMNS`` holds."""
    stream, seq, digest, events, runs, last_at, pruned_at, rule, freed, closed, signed, sig = row
    return PrunedSession(
        str(stream),
        int(seq),
        bytes(digest),
        int(events),
        _runs(runs),
        datetime.fromisoformat(last_at),
        datetime.fromisoformat(pruned_at),
        str(rule),
        int(freed),
        None if closed is None else datetime.fromisoformat(closed),
        int(signed),
        bytes(sig),
    )


def position_runs(positions: Iterable[int]) -> tuple[Run, ...]:
    """``positions`` as sorted runs of consecutive ones."""
    runs: list[list[int]] = []
    for position in sorted(positions):
        if runs and runs[-1][1] + 1 == position:
            runs[-1][1] = position
        else:
            runs.append([position, position])
    return tuple((first, last) for first, last in runs)


class PrunedPositions:
    """Every position the ``records`` account for, merged into runs, for ``covers``."""

    def __init__(self, records: Iterable[PrunedSession] = ()) -> None:
        merged = _merge(records)
        self._firsts = [first for first, _ in merged]
        self._lasts = [last for _, last in merged]

    def covers(self, first: int, last: int) -> bool:
        """Whether every position from ``first`` to ``last`` was held by a pruned session."""
        i = bisect.bisect_right(self._firsts, first) - 1
        return i >= 0 and self._lasts[i] >= last


def _merge(records: Iterable[PrunedSession]) -> tuple[Run, ...]:
    runs = sorted(run for record in records for run in record.positions)
    merged: list[list[int]] = []
    for first, last in runs:
        if merged and merged[-1][1] + 1 >= first:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return tuple((first, last) for first, last in merged)
