"""``MemoryStore``: the contract in process memory, for tests and throwaway sessions.

Its rows are a row per append, of encoding 3, as SQLite's and PostgreSQL's are
(docs/event-log.md#encoding-3): the same ``Packed`` tuples their queries return, kept in
position order and, per stream, in seq order, and read by the same code
(``plait.events._per_append``). A row keeps the hash its first event follows, as PostgreSQL's
does. Appends commit one at a time, under one lock, so positions are dense and in commit order.

Its parts (blobs, leases, inbox, pruning) keep their tables beside the rows, in one ``Tables``
under the same lock: a prune removes a session's rows, lease and commands at once.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from plait._errors import ConcurrencyError, StoreError
from plait.events._blobs import DEFAULT_BLOB_THRESHOLD
from plait.events._blobstore import BlobStore
from plait.events._codec import GENESIS_HASH
from plait.events._inbox import Inbox
from plait.events._leases import ENDED, Held, Lease, Leases, check_epoch, taken
from plait.events._per_append import PerAppendStore, holding
from plait.events._pruned import PrunedSession
from plait.events._pruning import Pruning
from plait.events._store import (
    REDACTED,
    Clock,
    PreparedAppend,
    RedactedMarker,
    check_expected,
    utc_now,
)
from plait.events._stored import Packed
from plait.events._types import Event

__all__ = ["MemoryStore"]


class Tables:
    """What a memory store holds, guarded by one lock: its rows and heads, and its parts'."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[Packed] = []
        """Every row, in position order."""
        self.by_stream: dict[str, list[Packed]] = {}
        """The same rows, each stream's in seq order."""
        self.heads: dict[str, tuple[int, bytes]] = {}
        self.blobs: dict[str, bytes | RedactedMarker] = {}
        self.held: dict[str, Held] = {}
        """The leases; their expiry by ``time.monotonic``."""
        self.inbox: dict[int, tuple[str, bytes]] = {}
        self.inbox_ids = itertools.count(1)
        self.pruned: list[PrunedSession] = []


class MemoryStore(PerAppendStore):
    """Keeps the same encoded rows a durable store would, so it behaves the same; not durable."""

    def __init__(
        self, *, blob_threshold: int = DEFAULT_BLOB_THRESHOLD, clock: Clock = utc_now
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        self._tables = tables = Tables()
        self.blobs = MemoryBlobs(tables)
        self.leases = MemoryLeases(tables)
        self.inbox = MemoryInbox(tables)
        self.pruning = MemoryPruning(tables)

    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        t = self._tables
        with t.lock:
            head_seq, head_hash = t.heads.get(stream, (0, GENESIS_HASH))
            lease = t.held.get(stream)
            check_epoch(stream, epoch, None if lease is None else lease[:2])
            check_expected(stream, expected_seq, head_seq)
            prepared = prepare(head_seq, head_hash)
            packed = prepared.packed()
            first = self._last_position_locked() + 1
            seq, count, prev, digest, data = msgspec.structs.astuple(packed)
            row: Packed = (first, stream, seq, count, prev, digest, data)
            t.rows.append(row)
            t.by_stream.setdefault(stream, []).append(row)
            t.blobs.update(prepared.blobs)
            t.heads[stream] = (packed.seq, packed.hash)
            return prepared.placed(first)

    def _head(self, stream: str) -> tuple[int, bytes]:
        with self._tables.lock:
            return self._tables.heads.get(stream, (0, GENESIS_HASH))

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Packed]:
        with self._tables.lock:
            rows = self._tables.by_stream.get(stream, [])
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
        with self._tables.lock:
            every = self._tables.rows
            start = max(bisect.bisect_right(every, after_position, key=_position) - 1, 0)
            end = len(every) if limit is None else start + limit + 1
            rows = every[start:end]
        if limit is not None:
            rows = holding(rows, after_position, limit, positions=True)
        return [row for row in rows if row[0] + row[3] - 1 > after_position]

    def _last_position_locked(self) -> int:
        rows = self._tables.rows
        return rows[-1][0] + rows[-1][3] - 1 if rows else 0

    def _last_position(self) -> int:
        with self._tables.lock:
            return self._last_position_locked()

    def _position_gap(self) -> tuple[int, int] | None:
        with self._tables.lock:
            before = 0
            for position, _, _, count, *_ in self._tables.rows:
                if position != before + 1:
                    return before, position
                before = position + count - 1
        return None

    def _streams(self) -> list[tuple[str, int]]:
        with self._tables.lock:
            return [(stream, head[0]) for stream, head in self._tables.heads.items()]


class MemoryBlobs(BlobStore):
    """A memory store's blobs."""

    def __init__(self, tables: Tables) -> None:
        super().__init__()
        self._tables = tables

    def state(self, sha256: str) -> bytes | RedactedMarker | None:
        with self._tables.lock:
            return self._tables.blobs.get(sha256)

    def _redact(self, sha256: str) -> bool:
        with self._tables.lock:
            if sha256 not in self._tables.blobs:
                return False
            self._tables.blobs[sha256] = REDACTED
            return True


class MemoryLeases(Leases):
    """A memory store's leases, timed by ``time.monotonic``."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables

    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        now = time.monotonic()
        leases = []
        with self._tables.lock:
            held = self._tables.held
            for stream in streams:
                holder, epoch, expires = held[stream] = taken(
                    held.get(stream, (None, 0, 0.0)), owner, now, lease_sec
                )
                leases.append(Lease(stream, holder, epoch, expires - now))
        return leases

    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        expires = time.monotonic() + lease_sec
        with self._tables.lock:
            rows = self._tables.held
            renewed = {
                stream: epoch
                for stream, epoch in held.items()
                if (found := rows.get(stream)) is not None
                and found[:2] == (owner, epoch)
                and found[2] != ENDED
            }
            for stream, epoch in renewed.items():
                rows[stream] = (owner, epoch, expires)
            return renewed

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        with self._tables.lock:
            if self._tables.held.get(stream, (None, 0))[:2] != (owner, epoch):
                return False
            self._tables.held[stream] = (None if idle else owner, epoch, ENDED)
            return True

    def _leases(self, stream: str | None) -> list[Lease]:
        now = time.monotonic()
        with self._tables.lock:
            held = self._tables.held
            found = held.items() if stream is None else _only(held, stream)
            return [Lease(s, o, e, x - now) for s, (o, e, x) in found]


class MemoryInbox(Inbox):
    """A memory store's inbox."""

    def __init__(self, tables: Tables) -> None:
        super().__init__()
        self._tables = tables

    def _put(self, stream: str, data: bytes) -> int:
        with self._tables.lock:
            cid = next(self._tables.inbox_ids)
            self._tables.inbox[cid] = (stream, data)
        return cid

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        with self._tables.lock:
            inbox = self._tables.inbox.items()
            return [(i, s, d) for i, (s, d) in inbox if streams is None or s in streams]

    def _drop(self, taken: list[tuple[str, int]]) -> None:
        with self._tables.lock:
            inbox = self._tables.inbox
            for stream, cid in taken:
                if inbox.get(cid, ("",))[0] == stream:
                    del inbox[cid]


class MemoryPruning(Pruning):
    """A memory store's records of pruned sessions, and their removal."""

    def __init__(self, tables: Tables) -> None:
        super().__init__()
        self._tables = tables

    def records(self, stream: str | None = None) -> list[PrunedSession]:
        with self._tables.lock:
            return [r for r in self._tables.pruned if stream in (None, r.stream)]

    def _remove(self, records: Sequence[PrunedSession], blobs: Sequence[str]) -> None:
        now = time.monotonic()
        t = self._tables
        with t.lock:
            for record in records:
                head = t.heads.get(record.stream)
                if head != (record.last_seq, record.last_hash):
                    raise ConcurrencyError(record.stream, record.last_seq, (head or (0,))[0])
                owner, _, expires = t.held.get(record.stream, (None, 0, 0.0))
                if owner is not None and expires > now:
                    why = f"its lease is held by {owner}: not pruned"
                    raise StoreError(f"session {record.stream}: {why}")
            gone = {record.stream for record in records}
            t.rows[:] = [row for row in t.rows if row[1] not in gone]
            for stream in gone:
                del t.by_stream[stream], t.heads[stream]
                t.held.pop(stream, None)
            t.inbox = {i: c for i, c in t.inbox.items() if c[0] not in gone}
            for sha in blobs:
                t.blobs.pop(sha, None)
            t.pruned.extend(records)


def _only(leases: dict[str, Held], stream: str) -> list[tuple[str, Held]]:
    return [(stream, leases[stream])] if stream in leases else []


def _seq(row: Packed) -> int:
    return row[2]


def _position(row: Packed) -> int:
    return row[0]
