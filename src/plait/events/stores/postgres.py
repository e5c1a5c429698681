"""``PostgresStore``: the event store in a PostgreSQL schema, shared by many processes.

* One autocommit connection per store object, guarded by a lock, serves every thread; each
  append is one transaction. A broken connection is reopened on the next call.
* Appends to *all* streams commit one at a time, under a transaction-scoped advisory lock keyed
  on the schema. Positions are assigned as ``max + 1`` under that lock, so they are dense and in
  commit order: a live reader of ``position > N`` can never see N+2 committed before N+1 and skip
  N+1 for good (as a sequence with concurrent writers would allow). The ``streams`` head is read
  under the same lock, so a lost race is a ``ConcurrencyError``, never a fork of the chain.
  Serializing writers costs throughput, which a store of agent sessions can afford.
* An append is one call of a server-side function (``postgres_sql``) in an implicit
  transaction: one round trip, commit included. It checks the lease, the lock and the head as
  above and raises an error of its own SQLSTATE when refusing. ``append_prepared`` knows its
  rows before it starts; ``append`` must chain its events to the head: it reads it first (one
  more round trip, no lock held while it encodes), unless this object wrote that head itself.
* Each append ``NOTIFY``s a channel named after the schema inside its transaction; PostgreSQL
  delivers it only once the events are committed and visible. Subscriptions ``LISTEN`` on a
  connection of their own, so appends from any process wake them at once, with no table polling.
* Tables and the function are created on open (``IF NOT EXISTS``, ``OR REPLACE``, under the
  same advisory lock so two processes opening a fresh database do not race); a complete schema
  is left alone, so a role without ``CREATE`` rights can use one an administrator prepared.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from plait.errors import ConcurrencyError, StoreError, StoreUnavailableError
from plait.events.blobs import DEFAULT_BLOB_THRESHOLD
from plait.events.codec import GENESIS_HASH
from plait.events.ownership import Lease
from plait.events.store import (
    REDACTED,
    Clock,
    EventStore,
    PreparedAppend,
    RedactedMarker,
    Row,
    Waiter,
    utc_now,
)
from plait.events.stores.postgres_sql import (
    APPEND_SIGNATURE,
    DDL,
    LEASE_LOST,
    QUERIES,
    SCHEMA_VERSION,
    STREAM_MOVED,
)
from plait.events.subscription import Signal
from plait.events.types import Event

__all__ = ["DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "plait"
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # PostgreSQL truncates at 63 bytes
Connection = psycopg.Connection[tuple[Any, ...]]


def _split_url(url: str) -> tuple[str, str | None]:
    """Return ``url`` without its ``schema`` query parameter (libpq rejects it), and its value."""
    parts = urlsplit(url)
    schema, kept = None, []
    for item in parts.query.split("&") if parts.scheme and parts.query else ():
        key, _, value = item.partition("=")
        if unquote(key) == "schema":
            schema = unquote(value)
        else:
            kept.append(item)
    return (urlunsplit(parts._replace(query="&".join(kept))) if schema is not None else url), schema


def _public_url(url: str) -> str:
    """Return ``url`` with any password masked, for messages."""
    parts = urlsplit(url)
    if not parts.scheme:  # a "key=value" conninfo string
        return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", url)
    user, at, host = parts.netloc.rpartition("@")
    query = re.sub(r"(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit(parts._replace(netloc=user.partition(":")[0] + at + host, query=query))


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class PostgresStore(EventStore):
    """An event store in one PostgreSQL schema (created with its tables if missing).

    ``url`` is a libpq URL or conninfo string. The schema is the ``schema`` argument, else the
    URL's ``?schema=NAME`` query parameter, else ``plait``.
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        clock: Clock = utc_now,
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        self._conninfo, url_schema = _split_url(url)
        self.url = _public_url(url)
        """The URL, with any password masked."""
        self.schema = schema or url_schema or DEFAULT_SCHEMA
        """The PostgreSQL schema holding the tables."""
        if not _SCHEMA_NAME.fullmatch(self.schema):
            raise StoreUnavailableError(
                f"{self.url}: invalid schema name {self.schema!r} (expected at most 63 letters, "
                "digits and underscores, not starting with a digit)"
            )
        digest = hashlib.sha256(f"plait.events:{self.schema}".encode()).digest()
        self._key = int.from_bytes(digest[:8], "big", signed=True)
        self.channel = f"plait_{self.schema}_events"
        """The ``LISTEN``/``NOTIFY`` channel announcing appends (payload: the last position)."""
        if len(self.channel) > 63:
            self.channel = f"plait_{digest.hex()[:40]}_events"
        self.inbox_channel = self.channel.removesuffix("_events") + "_inbox"
        """The channel announcing inbox commands (apart: owners are not woken by appends)."""
        s = sql.Identifier(self.schema)
        self._sql = {name: sql.SQL(text).format(s=s) for name, text in QUERIES.items()}
        self._lock = threading.RLock()
        self._closed = False
        self._waiters: weakref.WeakSet[_NotifyWaiter] = weakref.WeakSet()
        self._heads: dict[str, tuple[int, bytes]] = {}  # heads this object wrote, by stream
        self._conn = self._connect()
        try:
            with self._errors(opening=True) as conn:
                args = {"schema": self.schema, "function": APPEND_SIGNATURE}
                found = conn.execute(self._sql["layout"], args).fetchone()
                if found != (6, True):
                    with conn.transaction():
                        conn.execute(self._sql["lock"], (self._key,))
                        for statement in DDL:
                            conn.execute(sql.SQL(statement).format(s=s))
                (version,) = conn.execute(self._sql["version"]).fetchone() or ("0",)
            if int(version) > SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self.url} schema {self.schema}: store schema version {version} is "
                    f"newer than this plait understands ({SCHEMA_VERSION}); upgrade plait"
                )
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> Connection:
        """Open an autocommit connection (by default: 10 s connect timeout, named plait)."""
        try:
            extra: dict[str, str | int] = {"connect_timeout": 10, "application_name": "plait"}
            given = conninfo_to_dict(self._conninfo)
            defaults = {key: value for key, value in extra.items() if key not in given}
            return psycopg.connect(make_conninfo(self._conninfo, **defaults), autocommit=True)
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"{self.url}: cannot connect to PostgreSQL: {_text(exc)}"
            ) from exc

    @contextlib.contextmanager
    def _errors(self, *, opening: bool = False) -> Iterator[Connection]:
        """Hold the lock, yield a live connection, and turn psycopg errors into store errors."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.url}: the store is closed")
            if self._conn.broken:
                self._conn = self._connect()
            try:
                yield self._conn
            except psycopg.Error as exc:
                lost = self._conn.broken or (exc.sqlstate or "").startswith(("08", "57P"))
                if opening or lost:
                    what = "cannot open the store" if opening else "connection lost"
                    raise StoreUnavailableError(f"{self.url}: {what}: {_text(exc)}") from exc
                raise StoreError(f"{self.url} (schema {self.schema}): {_text(exc)}") from exc

    def _append_rows(
        self,
        stream: str,
        expected_seq: int,
        prepare: Callable[[int, bytes], PreparedAppend],
        epoch: int | None,
    ) -> list[Event]:
        known = self._heads.get(stream)
        head = known
        if head is None or head[0] != expected_seq:
            head = self._peek(stream, expected_seq, epoch)
        try:
            return self._write(stream, *head, prepare(*head), epoch)
        except ConcurrencyError as exc:
            if head is not known or exc.actual_seq != expected_seq:
                raise
        # The head this object wrote is no longer there (the database was restored?): look.
        head = self._peek(stream, expected_seq, epoch)
        return self._write(stream, *head, prepare(*head), epoch)

    def append_prepared(
        self, stream: str, prepared: PreparedAppend, *, epoch: int | None = None
    ) -> list[Event]:
        """Append what ``prepare`` made, as ``append`` would (``ConcurrencyError`` unless the
        stream's head is still the event it was made to follow): one round trip."""
        first = prepared.events[0]
        events = self._write(stream, first.seq - 1, first.prev_hash, prepared, epoch)
        self._notify()
        return events

    def _peek(self, stream: str, expected_seq: int, epoch: int | None) -> tuple[int, bytes]:
        """Return ``stream``'s head, refusing as the append would if it is not the expected one."""
        with self._errors() as conn:
            found = conn.execute(self._sql["peek"], {"stream": stream}, binary=True).fetchone()
        assert found is not None  # one row, whatever is there
        head_seq, head_hash, leased, owner, held_epoch = found
        self._check_epoch(stream, epoch, (owner, held_epoch) if leased else None)
        self._check_expected(stream, expected_seq, 0 if head_seq is None else head_seq)
        return (0, GENESIS_HASH) if head_seq is None else (int(head_seq), bytes(head_hash))

    def _write(
        self, stream: str, after: int, prev: bytes, prepared: PreparedAppend, epoch: int | None
    ) -> list[Event]:
        """Write ``prepared``, which follows seq ``after`` of hash ``prev``, in one call."""
        _, types, versions, data, hashes = (
            list(column) for column in zip(*prepared.rows, strict=True)
        )
        blobs = prepared.blobs
        sizes = [len(blob) for blob in blobs.values()]
        args = (stream, after, prev, epoch, self._key, self.channel, types, versions, data)
        with self._errors() as conn:
            try:
                found = conn.execute(
                    self._sql["append"], (*args, hashes, list(blobs), sizes, list(blobs.values()))
                ).fetchone()
            except psycopg.Error as exc:
                self._heads.pop(stream, None)
                detail = exc.diag.message_detail or ""
                if exc.sqlstate == LEASE_LOST:
                    lease = json.loads(detail)
                    self._check_epoch(stream, epoch, None if lease is None else tuple(lease))
                if exc.sqlstate == STREAM_MOVED:
                    raise ConcurrencyError(stream, after, int(detail)) from None
                raise
            if len(self._heads) >= 4096:  # a hint for the streams this object writes now
                self._heads.clear()
            self._heads[stream] = (after + len(hashes), hashes[-1])
        assert found is not None
        return prepared.placed(int(found[0]))

    def _query(self, name: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._errors() as conn:
            return conn.execute(self._sql[name], params, binary=True).fetchall()

    def _head(self, stream: str) -> tuple[int, bytes]:
        rows = self._query("head", (stream,))
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else (0, GENESIS_HASH)

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Row]:
        rows = self._query("rows", (stream, after, 2**62 if upto is None else upto, limit))
        return [_row(row) for row in rows]

    def _all_rows(self, after_position: int, limit: int | None) -> list[Row]:
        return [_row(row) for row in self._query("all", (after_position, limit))]

    def _streams(self) -> list[tuple[str, int]]:
        return [(str(stream), int(last)) for stream, last in self._query("streams")]

    def _position_gap(self) -> tuple[int, int] | None:
        ((count, last),) = self._query("dense")
        if count == last:
            return None
        found = self._query("gap")
        return (int(found[0][0]), int(found[0][1])) if found else None

    def _blob(self, sha256: str) -> bytes | RedactedMarker | None:
        rows = self._query("blob", (sha256,))
        if not rows:
            return None
        return REDACTED if rows[0][0] is None else bytes(rows[0][0])

    def _redact(self, sha256: str) -> bool:
        with self._errors() as conn:
            return conn.execute(self._sql["redact"], (sha256,)).rowcount > 0

    def _acquire(self, stream: str, owner: str, lease_sec: float) -> Lease:
        args = {"stream": stream, "owner": owner, "sec": lease_sec}
        with self._errors() as conn, conn.transaction():
            conn.execute(self._sql["acquire"], args)
            found = conn.execute(self._sql["leases"], args).fetchone()
        assert found is not None  # inserted, or there already
        return _lease(found)

    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        rows = self._query("renew", (lease_sec, list(held), list(held.values()), owner))
        return {str(stream): int(epoch) for stream, epoch in rows}

    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        with self._errors() as conn:
            args = (None if idle else owner, stream, owner, epoch)
            return conn.execute(self._sql["release"], args).rowcount > 0

    def _leases(self, stream: str | None) -> list[Lease]:
        with self._errors() as conn:
            return [_lease(row) for row in conn.execute(self._sql["leases"], {"stream": stream})]

    def _put_command(self, stream: str, data: bytes) -> int:
        with self._errors() as conn, conn.transaction():
            found = conn.execute(self._sql["put_command"], (stream, data)).fetchone()
            assert found is not None
            conn.execute(self._sql["notify"], (self.inbox_channel, str(found[0])))
        self._commanded.notify()
        return int(found[0])

    def _commands(self, stream: str | None) -> list[tuple[int, str, bytes]]:
        with self._errors() as conn:
            rows = conn.execute(self._sql["commands"], {"stream": stream}, binary=True)
            return [(int(i), str(s), bytes(d)) for i, s, d in rows]

    def _drop_commands(self, ids: list[int]) -> None:
        with self._errors() as conn:
            conn.execute(self._sql["drop_commands"], (ids,))

    def _waiter(self) -> Waiter:
        return self._listener(self.channel)

    def _inbox_waiter(self) -> Waiter:
        return self._listener(self.inbox_channel, self._commanded)

    def _listener(self, channel: str, local: Signal | None = None) -> _NotifyWaiter:
        """A waiter on ``channel`` (and ``local``), closed with the store."""
        waiter = _NotifyWaiter(self, channel, local)
        self._waiters.add(waiter)
        return waiter

    def close(self) -> None:
        """Close the connection and every live subscription's listener; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        for waiter in list(self._waiters):
            waiter.close()


def _lease(row: tuple[Any, ...]) -> Lease:
    stream, owner, epoch, remaining = row
    return Lease(str(stream), owner, int(epoch), float(remaining))


def _row(row: tuple[Any, ...]) -> Row:
    position, data, digest, stream, seq, type_name, v = row
    return (int(position), bytes(data), bytes(digest), stream, int(seq), type_name, int(v))


class _NotifyWaiter(Waiter):
    """Counts ``NOTIFY``s on the store's channel, received on a connection of its own.

    ``LISTEN`` runs at construction, before the subscription's first read, so a commit falling
    between a read and the wait is still noticed. psycopg must not close a connection another
    thread is waiting on, so ``wait`` blocks in short steps and closing happens between them.
    """

    STEP_SEC = 0.1

    def __init__(self, store: PostgresStore, channel: str, local: Signal | None = None) -> None:
        self._store = store
        self._channel = channel
        self._local = local  # moved in this process (``Owner.wake``): seen within STEP_SEC
        self._io = threading.Lock()
        self._closed = False
        self._count = 0
        self._conn = self._listen()

    def _listen(self) -> Connection:
        conn = self._store._connect()
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"{self._store.url}: cannot LISTEN: {_text(exc)}") from exc
        return conn

    def _receive(self, timeout: float) -> None:
        """Count the notifications arriving within ``timeout`` (0: only those pending)."""
        with self._io:
            try:
                if self._closed:
                    return
                if self._conn.broken:
                    self._conn = self._listen()
                    self._count += 1  # notifications may have been lost: make the reader look
                for _ in self._conn.notifies(timeout=timeout, stop_after=1 if timeout else None):
                    self._count += 1
            except psycopg.Error as exc:
                if not self._conn.broken:
                    raise StoreError(f"{self._store.url}: LISTEN failed: {_text(exc)}") from exc
                self._count += 1  # reconnect on the next call; the reader re-reads meanwhile
            finally:
                if self._closed:
                    self._conn.close()

    def token(self) -> int:
        """Return how many notifications (reconnections, local moves) this waiter has seen."""
        self._receive(0)
        return self._seen()

    def _seen(self) -> int:
        return self._count + (self._local.count if self._local is not None else 0)

    def wait(self, token: int, timeout: float | None) -> None:
        """Block until a notification arrives after ``token``, ``timeout`` passes, or close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed and self._seen() == token:
            step = self.STEP_SEC
            if deadline is not None:
                step = min(step, deadline - time.monotonic())
                if step <= 0:
                    return
            self._receive(step)

    def close(self) -> None:
        """Close the listening connection; a blocked ``wait`` returns within ``STEP_SEC``."""
        self._closed = True
        with self._io:  # a waiting thread holds it for at most STEP_SEC
            self._conn.close()
