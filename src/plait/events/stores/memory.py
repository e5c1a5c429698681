"""``MemoryStore``: the contract in process memory, for tests and throwaway sessions.

Its rows are a row per append, of encoding 3, as SQLite's and PostgreSQL's are
(docs/event-log.md#encoding-3): the same ``Packed`` tuples their queries return, kept in
position order and, per stream, in seq order, and read by the same code
(``plait.events.per_append``). A row keeps the hash its first event follows, as PostgreSQL's
does. Appends commit one at a time, under one lock, so positions are dense and in commit order.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from plait.errors import ConcurrencyError, StoreError
from plait.events.blobs import DEFAULT_BLOB_THRESHOLD
from plait.events.codec import GENESIS_HASH
from plait.events.ownership import ENDED, Held, Lease, check_epoch, taken
from plait.events.per_append import PerAppendStore, holding
from plait.events.pruned import PrunedSession
from plait.events.store import (
    REDACTED,
    Clock,
    PreparedAppend,
    RedactedMarker,
    check_expected,
    utc_now,
)
from plait.events.stored import Packed
from plait.events.types import Event

__all__ = ["MemoryStore"]


class MemoryStore(PerAppendStore):
    """Keeps the same encoded rows a durable store would, so it behaves the same; not durable."""

    def __init__(
        self, *, blob_threshold: int = DEFAULT_BLOB_THRESHOLD, clock: Clock = utc_now
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        self._lock = threading.Lock()
        self._all: list[Packed] = []  # in position order
        self._by_stream: dict[str, list[Packed]] = {}  # the same rows, each stream's in seq order
        self._blobs: dict[str, bytes | RedactedMarker] = {}
        self._heads: dict[str, tuple[int, bytes]] = {}
        self._held: dict[str, Held] = {}  # expires by time.monotonic
        self._inbox: dict[int, tuple[str, bytes]] = {}
        self._inbox_ids = itertools.count(1)
        self._pruned: list[PrunedSession] = []

    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        with self._lock:
            head_seq, head_hash = self._head_locked(stream)
            lease = self._held.get(stream)
            check_epoch(stream, epoch, None if lease is None else lease[:2])
            check_expected(stream, expected_seq, head_seq)
            prepared = prepare(head_seq, head_hash)
            packed = prepared.packed()
            first = self._last_position_locked() + 1
            seq, count, prev, digest, data = msgspec.structs.astuple(packed)
            row: Packed = (first, stream, seq, count, prev, digest, data)
            self._all.append(row)
            self._by_stream.setdefault(stream, []).append(row)
            self._blobs.update(prepared.blobs)
            self._heads[stream] = (packed.seq, packed.hash)
            return prepared.placed(first)

    def _head_locked(self, stream: str) -> tuple[int, bytes]:
        return self._heads.get(stream, (0, GENESIS_HASH))

    def _head(self, stream: str) -> tuple[int, bytes]:
        with self._lock:
            return self._head_locked(stream)

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Packed]:
        with self._lock:
            rows = self._by_stream.get(stream, [])
            start = bisect.bisect_left(rows, after, key=_seq)  # the row holding ``after``
            end = len(rows) if upto is None else bisect.bisect_left(rows, upto, key=_seq) + 1
            if limit is not None:
                end = min(end, start + limit)
            return rows[start:end]

    def _all_rows(self, after_position: int, limit: int | None, settled: bool) -> list[Packed]:
        # As SQLite's query chooses them (``sqlite_schema.ALL_SQL``): from the row holding
        # ``after_position``, at most a row more than events asked for, and of those only the
        # rows that hold some of the first ``limit`` events after it. Every row is settled:
        # appends commit one at a time.
        with self._lock:
            start = max(bisect.bisect_right(self._all, after_position, key=_position) - 1, 0)
            end = len(self._all) if limit is None else start + limit + 1
            rows = self._all[start:end]
        if limit is not None:
            rows = holding(rows, after_position, limit, positions=True)
        return [row for row in rows if row[0] + row[3] - 1 > after_position]

    def _last_position_locked(self) -> int:
        return self._all[-1][0] + self._all[-1][3] - 1 if self._all else 0

    def _last_position(self) -> int:
        with self._lock:
            return self._last_position_locked()

    def _position_gap(self) -> tuple[int, int] | None:
        with self._lock:
            before = 0
            for position, _, _, count, *_ in self._all:
                if position != before + 1:
                    return before, position
                before = position + count - 1
        return None

    def _streams(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(stream, head[0]) for stream, head in self._heads.items()]

    def _blob(self, sha256: str) -> bytes | RedactedMarker | None:
        with self._lock:
            return self._blobs.get(sha256)

    def _redact(self, sha256: str) -> bool:
        with self._lock:
            if sha256 not in self._blobs:
                return False
            self._blobs[sha256] = REDACTED
            return True

    def _pruned_records(self, stream: str | None) -> list[PrunedSession]:
        with self._lock:
            return [r for r in self._pruned if stream in (None, r.stream)]

    def _remove_sessions(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for record in records:
                head = self._heads.get(record.stream)
                if head != (record.last_seq, record.last_hash):
                    raise ConcurrencyError(record.stream, record.last_seq, (head or (0,))[0])
                owner, _, expires = self._held.get(record.stream, (None, 0, 0.0))
                if owner is not None and expires > now:
                    why = f"its lease is held by {owner}: not pruned"
                    raise StoreError(f"session {record.stream}: {why}")
            gone = {record.stream for record in records}
            self._all = [row for row in self._all if row[1] not in gone]
            for stream in gone:
                del self._by_stream[stream], self._heads[stream]
                self._held.pop(stream, None)
            self._inbox = {i: c for i, c in self._inbox.items() if c[0] not in gone}
            for sha in blobs:
                self._blobs.pop(sha, None)
            self._pruned.extend(records)

    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        now = time.monotonic()
        leases = []
        with self._lock:
            for stream in streams:
                holder, epoch, expires = self._held[stream] = taken(
                    self._held.get(stream, (None, 0, 0.0)), owner, now, lease_sec
                )
                leases.append(Lease(stream, holder, epoch, expires - now))
        return leases

    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        expires = time.monotonic() + lease_sec
        with self._lock:
            renewed = {
                stream: epoch
                for stream, epoch in held.items()
                if (found := self._held.get(stream)) is not None
                and found[:2] == (owner, epoch)
                and found[2] != ENDED
            }
            for stream, epoch in renewed.items():
                self._held[stream] = (owner, epoch, expires)
            return renewed

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        with self._lock:
            if self._held.get(stream, (None, 0))[:2] != (owner, epoch):
                return False
            self._held[stream] = (None if idle else owner, epoch, ENDED)
            return True

    def _leases(self, stream: str | None) -> list[Lease]:
        now = time.monotonic()
        with self._lock:
            found = self._held.items() if stream is None else _only(self._held, stream)
            return [Lease(s, o, e, x - now) for s, (o, e, x) in found]

    def _put_command(self, stream: str, data: bytes) -> int:
        with self._lock:
            cid = next(self._inbox_ids)
            self._inbox[cid] = (stream, data)
        self._commanded.notify()
        return cid

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        with self._lock:
            inbox = self._inbox.items()
            return [(i, s, d) for i, (s, d) in inbox if streams is None or s in streams]

    def _drop_commands(self, taken: list[tuple[str, int]]) -> None:
        with self._lock:
            for stream, cid in taken:
                if self._inbox.get(cid, ("",))[0] == stream:
                    del self._inbox[cid]


def _only(leases: dict[str, Held], stream: str) -> list[tuple[str, Held]]:
    return [(stream, leases[stream])] if stream in leases else []


def _seq(row: Packed) -> int:
    return row[2]


def _position(row: Packed) -> int:
    return row[0]
