"""How ``SqliteStore`` writes appends: many at once, in one transaction of a few statements.

Appends made while another is being written wait together and are written in one transaction
(group commit): one fsync for many sessions' appends, each acknowledged only once that commit is
durable, and each refused for its own reason only (a stale writer, an event it cannot store).

The writer remembers each stream's head and the last position, as it wrote them. Once it holds
SQLite's write lock it asks ``PRAGMA data_version``, which moves only when another connection
(another process) committed: then it forgets what it remembered and reads it again. So a
transaction takes the same few statements whatever it holds: the version, one insert of each
append's row (``plait.events._packing``: its events, one row), one upsert of the streams' heads,
the commit (and, for a stream it has not written yet, one read of the heads; for a fenced
append, one read of the leases).
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from plait._errors import StoreError
from plait.events._codec import GENESIS_HASH
from plait.events._leases import check_epoch
from plait.events._store import PreparedAppend, check_expected
from plait.events._types import Event
from plait.events.stores._sqlite_content import pack_content, split
from plait.events.stores._sqlite_content import write as write_content
from plait.events.stores._sqlite_files import begin, rollback
from plait.events.stores._sqlite_schema import LAST_POSITION_SQL, NAME_SQL

__all__ = ["Writes"]

Prepare = Callable[[int, bytes], PreparedAppend]

_MOST_HEADS = 100_000
"""Stream heads remembered at most; past it they are forgotten and read again as needed."""

_APPEND_SQL = (
    "INSERT INTO appends (position, stream, seq, count, hash, data, content) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
"""A row of ``appends``; its ``prev_hash`` is left ``NULL``: the hash of the row before
(``sqlite_schema``)."""


@functools.cache
def _heads_sql(count: int) -> str:
    """The upsert of ``count`` streams' heads, ``(stream, last_seq, last_hash, created)``
    each; ``created`` stays what it was for a stream already there."""
    return (
        "INSERT INTO streams (stream, last_seq, last_hash, created) VALUES "
        + ", ".join(["(?, ?, ?, ?)"] * count)
        + " ON CONFLICT (stream) DO UPDATE SET "
        "last_seq = excluded.last_seq, last_hash = excluded.last_hash"
    )


class Writes:
    """The appends of one ``SqliteStore``: queued, then written together."""

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.RLock,
        error: Callable[[sqlite3.DatabaseError], StoreError],
        path: Path,
    ) -> None:
        """``lock`` guards ``db`` (the store's); ``error`` turns SQLite's errors into the
        store's."""
        self._db = db
        self._lock = lock
        self._error = error
        self._path = path
        self._queue_lock = threading.Lock()
        self._queue: list[_Append] = []  # appends waiting to be written
        self._leading = False  # a thread is writing, and will hand the lead on
        self._heads: dict[str, tuple[int, bytes]] = {}
        self._position: int | None = None  # the last position, if known
        self._version: int | None = None  # data_version when they were last known good
        self._keys: dict[str, int] = {}
        """The key in ``names`` of each stream id written (a key, once committed, is for
        ever)."""

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
            if lead:
                self._leading = True
            else:
                mine.woken = threading.Lock()  # released when it is written or leads
                mine.woken.acquire()
        if not lead:
            mine.woken.acquire()  # type: ignore[union-attr]
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
                if append is not mine and append.woken is not None:
                    append.woken.release()
            with self._queue_lock:
                if self._queue:
                    self._queue[0].woken.release()  # type: ignore[union-attr] # it leads next
                else:
                    self._leading = False

    def _write(self, batch: list[_Append]) -> None:
        """Write ``batch`` in one transaction; if it fails as a whole, write each alone, so
        that each append fails for its own reason only."""
        try:
            try:
                self._transaction(batch)
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
        except StoreError as exc:
            if len(batch) == 1:
                batch[0].fail(exc)
                return
            for append in batch:
                if not append.done:  # one refused in the batch stays refused
                    self._write([append])

    def _transaction(self, batch: list[_Append]) -> None:
        db = self._db
        try:
            begin(db)
            position = self._known(batch)
            heads = self._heads  # moved as the batch is written; forgotten if it fails
            fenced = [append.stream for append in batch if append.epoch is not None]
            leases = self._leases(fenced) if fenced else {}
            written: list[tuple[_Append, PreparedAppend, int]] = []
            moved: dict[str, int] = {}  # stream -> the first position written to it
            blobs: dict[str, bytes] = {}
            for append in batch:
                stream = append.stream
                head_seq, head_hash = heads[stream]
                try:
                    if append.epoch is not None:
                        check_epoch(stream, append.epoch, leases.get(stream))
                    check_expected(stream, append.expected_seq, head_seq)
                    prepared = append.prepare(head_seq, head_hash)
                except Exception as exc:  # refused: nothing of it is written
                    append.fail(exc)
                    continue
                first = position + 1
                made = self._write_row(stream, first, prepared)
                position += len(prepared.rows)
                last = prepared.rows[-1]
                heads[stream] = (last[0], last[4])
                if stream not in moved:
                    moved[stream] = first
                if made:
                    blobs.update(made)
                written.append((append, prepared, first))
            if blobs:
                _write_blobs(db, blobs)
            if moved:
                db.execute(
                    _heads_sql(len(moved)),
                    [v for s, first in moved.items() for v in (s, *heads[s], first)],
                )
            db.execute("COMMIT")
        except BaseException:
            self.forget()
            rollback(db)
            raise
        self._position = position
        for append, prepared, first in written:
            append.succeed(prepared.placed(first))

    def _write_row(self, stream: str, first: int, prepared: PreparedAppend) -> dict[str, bytes]:
        """Write ``prepared`` as one row of ``appends``, at position ``first``, with its
        small blobs; return the blobs left for ``blobs``."""
        row = prepared.packed()
        apart, kept = split(prepared.blobs)
        content = pack_content(stream, list(kept.values())) if kept else None
        values = (first, self._key(stream), row.seq, row.count, row.hash, row.data)
        self._db.execute(_APPEND_SQL, (*values, content))
        if kept:
            write_content(self._db, first, kept)
        return apart

    def _key(self, stream: str) -> int:
        """The key of ``stream`` in ``names``, given it if it has none yet."""
        key = self._keys.get(stream)
        if key is None:
            db = self._db
            db.execute(NAME_SQL, (stream,))
            ((key,),) = db.execute("SELECT key FROM names WHERE name = ?", (stream,)).fetchall()
            self._keys[stream] = key
        return key

    def _known(self, batch: list[_Append]) -> int:
        """Return the last position, and see that ``_heads`` holds the heads of ``batch``'s
        streams, read again where another connection may have moved them (the write lock is
        held)."""
        db = self._db
        heads = self._heads
        (version,) = db.execute("PRAGMA data_version").fetchone()
        if version != self._version or len(heads) > _MOST_HEADS:
            self.forget()
            self._version = version
        if self._position is None:
            (self._position,) = db.execute(LAST_POSITION_SQL).fetchone()
        unknown = [append.stream for append in batch if append.stream not in heads]
        if unknown:
            unknown = sorted(set(unknown))
            marks = ", ".join("?" * len(unknown))
            found = db.execute(
                f"SELECT stream, last_seq, last_hash FROM streams WHERE stream IN ({marks})",
                unknown,
            ).fetchall()
            heads.update({s: (int(seq), bytes(digest)) for s, seq, digest in found})
            for stream in unknown:
                heads.setdefault(stream, (0, GENESIS_HASH))
        assert self._position is not None
        return self._position

    def _leases(self, fenced: list[str]) -> dict[str, tuple[str | None, int]]:
        """The leases of the fenced streams, read in the write transaction (a lease is taken
        under the same lock, so none changes hands before the commit). An append without an
        epoch is not fenced: it reads none."""
        fenced = sorted(set(fenced))
        marks = ", ".join("?" * len(fenced))
        found = self._db.execute(
            f"SELECT stream, owner, epoch FROM leases WHERE stream IN ({marks})", fenced
        ).fetchall()
        return {str(stream): (owner, int(epoch)) for stream, owner, epoch in found}

    def forget(self) -> None:
        """Forget the heads, the position and the keys it remembers (a transaction rolled
        back, sessions pruned): the next write reads them again."""
        self._heads.clear()
        self._position = None
        self._keys.clear()  # one made in a transaction rolled back is not there


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
        self.woken: threading.Lock | None = None
        """For an append that waits behind a leader: held until its writer is woken (written,
        or given the lead)."""

    def succeed(self, events: list[Event]) -> None:
        self.events, self.error, self.done = events, None, True

    def fail(self, error: Exception) -> None:
        self.error, self.done = error, True


_BLOB_SQL = (
    "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, {}) "
    "ON CONFLICT (sha256) DO UPDATE SET data = excluded.data WHERE blobs.data IS NULL"
)
_LARGE_BLOB = 1 << 20
"""Blobs of more bytes than this are written in pieces into a zeroblob: SQLite copies a bound
blob twice (its own copy, then the row's record), 100 MB for a 50 MB prompt (bench/memory.py)."""


def _write_blobs(db: sqlite3.Connection, blobs: dict[str, bytes]) -> None:
    """Store ``blobs`` (a redacted one gets its content back; a stored one stays as it is)."""
    small = [(sha, len(data), data) for sha, data in blobs.items() if len(data) <= _LARGE_BLOB]
    if small:
        db.executemany(_BLOB_SQL.format("?"), small)
    for sha, data in blobs.items():
        if len(data) <= _LARGE_BLOB:
            continue
        sql = _BLOB_SQL.format("zeroblob(?)") + " RETURNING rowid"
        rows = db.execute(sql, (sha, len(data), len(data))).fetchall()
        if not rows:
            continue  # stored already
        with db.blobopen("blobs", "data", rows[0][0]) as blob, memoryview(data) as view:
            for start in range(0, len(view), _LARGE_BLOB):
                blob.write(view[start : start + _LARGE_BLOB])
