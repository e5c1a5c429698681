"""How ``SqliteStore`` writes appends: many at once, in one transaction of a few statements.

Appends made while another is being written wait together and are written in one transaction
(group commit): one fsync for many sessions' appends, each acknowledged only once that commit is
durable, and each refused for its own reason only (a stale writer, an event it cannot store).

The writer remembers each stream's head and the last position, as it wrote them. Once it holds
SQLite's write lock it asks ``PRAGMA data_version``, which moves only when another connection
(another process) committed: then it forgets what it remembered and reads it again. So a
transaction takes the same few statements whatever it holds: the version, one insert of all its
events, one upsert of the streams' heads, the commit (and, for a stream it has not written yet,
one read of the heads).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from plait.errors import StoreError
from plait.events.codec import GENESIS_HASH
from plait.events.store import EventStore, PreparedAppend
from plait.events.types import Event

__all__ = ["Writes"]

Prepare = Callable[[int, bytes], PreparedAppend]

_ROWS_PER_INSERT = 128
"""Events per INSERT statement (7 values each: well under SQLite's limit of bound values)."""

_MOST_HEADS = 100_000
"""Stream heads remembered at most; past it they are forgotten and read again as needed."""

_EVENT_ROW = "(?, ?, ?, ?, ?, ?, ?)"


class Writes:
    """The appends of one ``SqliteStore``: queued, then written together."""

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.RLock,
        errors: Callable[[], contextlib.AbstractContextManager[None]],
        path: Path,
    ) -> None:
        """``lock`` guards ``db`` (the store's); ``errors`` turns SQLite's errors into the
        store's."""
        self._db = db
        self._lock = lock
        self._errors = errors
        self._path = path
        self._queue_lock = threading.Lock()
        self._queue: list[_Append] = []  # appends waiting to be written
        self._leading = False  # a thread is writing, and will hand the lead on
        self._heads: dict[str, tuple[int, bytes]] = {}
        self._position: int | None = None  # the last position, if known
        self._version: int | None = None  # data_version when they were last known good

    def append(
        self, stream: str, expected_seq: int, prepare: Prepare, epoch: int | None
    ) -> list[Event]:
        """Write one append with whatever waits beside it; return its events once durable.

        One thread at a time leads: it writes what is queued, wakes each writer whose append
        it wrote, and hands the lead to the first that came meanwhile. The others sleep until
        then, on a lock of their own, not queued on the connection's."""
        mine = _Append(stream, expected_seq, prepare, epoch)
        with self._queue_lock:
            self._queue.append(mine)
            lead = not self._leading
            self._leading = True
        if not lead:
            mine.woken.acquire()  # written, or given the lead
        if not mine.done:
            self._lead(mine)
        if mine.error is not None:
            raise mine.error
        return mine.events

    def _lead(self, mine: _Append) -> None:
        batch: list[_Append] = []
        try:
            with self._lock:  # what queues while it waits for the connection joins the batch
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._write(batch)
        except BaseException as exc:  # not the store's failure: raised here, and the others
            for append in batch:  # in the batch are told, not left waiting
                if not append.done:
                    append.fail(StoreError(f"{self._path}: not written: {exc!r}"))
            raise
        finally:
            for append in batch:
                if append is not mine:
                    append.woken.release()
            with self._queue_lock:
                if self._queue:
                    self._queue[0].woken.release()  # it leads next
                else:
                    self._leading = False

    def _write(self, batch: list[_Append]) -> None:
        """Write ``batch`` in one transaction; if it fails as a whole, write each alone, so
        that each append fails for its own reason only."""
        try:
            with self._errors():
                self._transaction(batch)
        except StoreError as exc:
            if len(batch) == 1:
                batch[0].fail(exc)
                return
            for append in batch:
                if not append.done:  # one refused in the batch stays refused
                    self._write([append])

    def _transaction(self, batch: list[_Append]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            position, heads = self._known(batch)
            leases = self._leases(batch)
            rows: list[tuple[object, ...]] = []
            written: list[tuple[_Append, PreparedAppend, int]] = []
            blobs: dict[str, bytes] = {}
            for append in batch:
                head_seq, head_hash = heads[append.stream]
                try:
                    EventStore._check_epoch(append.stream, append.epoch, leases.get(append.stream))
                    EventStore._check_expected(append.stream, append.expected_seq, head_seq)
                    prepared = append.prepare(head_seq, head_hash)
                except Exception as exc:  # refused: nothing of it is written
                    append.fail(exc)
                    continue
                first = position + 1
                rows += [(p, append.stream, *row) for p, row in enumerate(prepared.rows, first)]
                position += len(prepared.rows)
                last = prepared.rows[-1]
                heads[append.stream] = (last[0], last[4])
                blobs.update(prepared.blobs)
                written.append((append, prepared, first))
            created = {a.stream: first for a, _, first in reversed(written)}  # each one's first
            self._insert(rows, blobs, {s: (*heads[s], first) for s, first in created.items()})
            db.execute("COMMIT")
        except BaseException:
            self._forget()
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self._position = position
        self._heads.update(heads)
        for append, prepared, first in written:
            append.succeed(prepared.placed(first))

    def _known(self, batch: list[_Append]) -> tuple[int, dict[str, tuple[int, bytes]]]:
        """The last position and the heads of ``batch``'s streams, read again only where
        another connection may have moved them (the write lock is held)."""
        db = self._db
        (version,) = db.execute("PRAGMA data_version").fetchone()
        if version != self._version or len(self._heads) > _MOST_HEADS:
            self._forget()
            self._version = version
        if self._position is None:
            (self._position,) = db.execute(
                "SELECT coalesce(max(position), 0) FROM events"
            ).fetchone()
        streams = {append.stream for append in batch}
        unknown = sorted(streams - self._heads.keys())
        if unknown:
            marks = ", ".join("?" * len(unknown))
            found = db.execute(
                f"SELECT stream, last_seq, last_hash FROM streams WHERE stream IN ({marks})",
                unknown,
            ).fetchall()
            self._heads.update({s: (int(seq), bytes(digest)) for s, seq, digest in found})
            for stream in unknown:
                self._heads.setdefault(stream, (0, GENESIS_HASH))
        assert self._position is not None
        return self._position, {stream: self._heads[stream] for stream in streams}

    def _leases(self, batch: list[_Append]) -> dict[str, tuple[str | None, int]]:
        """The leases of ``batch``'s fenced streams, read in the write transaction (a lease is
        taken under the same lock, so none changes hands before the commit)."""
        fenced = sorted({append.stream for append in batch if append.epoch is not None})
        if not fenced:
            return {}
        marks = ", ".join("?" * len(fenced))
        found = self._db.execute(
            f"SELECT stream, owner, epoch FROM leases WHERE stream IN ({marks})", fenced
        ).fetchall()
        return {str(stream): (owner, int(epoch)) for stream, owner, epoch in found}

    def _insert(
        self,
        rows: list[tuple[object, ...]],
        blobs: dict[str, bytes],
        heads: dict[str, tuple[int, bytes, int]],
    ) -> None:
        """Insert the events (a few statements for any number), the blobs, and the heads:
        ``(last_seq, last_hash, created)`` by stream, ``created`` kept where the stream is."""
        db = self._db
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            part = rows[start : start + _ROWS_PER_INSERT]
            db.execute(
                "INSERT INTO events (position, stream, seq, type, v, data, hash) VALUES "
                + ", ".join([_EVENT_ROW] * len(part)),
                [value for row in part for value in row],
            )
        if blobs:
            db.executemany(
                "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?) "
                "ON CONFLICT (sha256) DO UPDATE SET data = excluded.data "
                "WHERE blobs.data IS NULL",
                [(sha, len(data), data) for sha, data in blobs.items()],
            )
        if heads:
            db.execute(
                "INSERT INTO streams (stream, last_seq, last_hash, created) VALUES "
                + ", ".join(["(?, ?, ?, ?)"] * len(heads))
                + " ON CONFLICT (stream) DO UPDATE SET "
                "last_seq = excluded.last_seq, last_hash = excluded.last_hash",
                [value for stream, head in heads.items() for value in (stream, *head)],
            )

    def _forget(self) -> None:
        self._heads.clear()
        self._position = None


class _Append:
    """One append waiting to be written, and how it went."""

    __slots__ = ("done", "epoch", "error", "events", "expected_seq", "prepare", "stream", "woken")

    def __init__(self, stream: str, expected_seq: int, prepare: Prepare, epoch: int | None) -> None:
        self.stream = stream
        self.epoch = epoch
        self.expected_seq = expected_seq
        self.prepare = prepare
        self.done = False
        self.events: list[Event] = []
        self.error: Exception | None = None
        self.woken = threading.Lock()
        """Held until its writer is woken: written, or given the lead."""
        self.woken.acquire()

    def succeed(self, events: list[Event]) -> None:
        self.events, self.error, self.done = events, None, True

    def fail(self, error: Exception) -> None:
        self.error, self.done = error, True
