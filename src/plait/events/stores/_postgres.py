"""``PostgresStore``: the event store in a PostgreSQL schema, shared by many processes.

* One autocommit connection per store object, guarded by a lock, serves every thread; each
  append is one transaction. A lost connection is reopened with backoff and the call made
  again, safely, while the server is away less than ``outage_sec`` (``postgres_link``).
* Appends of different streams take no lock in common, so they commit side by side and
  PostgreSQL's group commit serves them all. A stream's head row is moved only if it is still
  the event the append follows; a second writer waits on that row, then finds it moved: a
  ``ConcurrencyError``, never a fork of the chain.
* Positions order events across streams without a counter every append waits on: an event's
  position is its transaction's id, shifted, plus its index in its append
  (``postgres_sql.POSITION_BITS``). They are not dense and not in commit order, so a
  subscription reads only below the first position a transaction still running may hold
  (``position_bound_v1``): having handed out position N, it never misses one below it later.
* An append is one call of a server-side function (``postgres_sql``) in an implicit
  transaction: one round trip, commit included. It checks the lease and the head as above and
  raises an error of its own SQLSTATE when refusing. ``append_prepared`` knows its rows before
  it starts; ``append`` must chain its events to the head: it reads it first (one more round
  trip, no lock held while it encodes), unless this object wrote that head itself.
* Appends are announced on a channel named after the schema once committed, by the store's
  ``Announcer`` (a ``NOTIFY`` inside the append would serialise every commit). Subscriptions
  ``LISTEN`` on a connection of their own, so appends from any process wake them at once; they
  also look on their own, for rows held above the settled bound and for announcements lost to
  a kill (``postgres_settled``).
* Tables and functions are created on open when missing (``postgres_schema``).
* The store's parts (its blobs, leases, inbox and pruning: ``postgres_blobs``,
  ``postgres_leases``, ``postgres_inbox``, ``postgres_prune``) make their calls as the store
  does, through its ``Calls`` (``postgres_calls``).
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Callable
from typing import Any

import psycopg

from plait._errors import ConcurrencyError, StoreError, StoreUnavailableError
from plait.events._blobs import DEFAULT_BLOB_THRESHOLD
from plait.events._checks import Placed
from plait.events._codec import GENESIS_HASH
from plait.events._leases import check_epoch
from plait.events._per_append import PerAppendStore
from plait.events._space import Space
from plait.events._store import Clock, PreparedAppend, Waiter, check_expected, utc_now
from plait.events._stored import Packed
from plait.events._subscription import Signal
from plait.events._types import Event
from plait.events.stores._postgres_announce import Announcer
from plait.events.stores._postgres_arrays import blob_columns
from plait.events.stores._postgres_blobs import PostgresBlobs
from plait.events.stores._postgres_calls import Calls
from plait.events.stores._postgres_inbox import PostgresInbox
from plait.events.stores._postgres_leases import PostgresLeases
from plait.events.stores._postgres_link import DEFAULT_OUTAGE_SEC, Connection, Link
from plait.events.stores._postgres_listen import NotifyWaiter
from plait.events.stores._postgres_prune import PostgresPruning, vacuum_hint
from plait.events.stores._postgres_schema import open_schema
from plait.events.stores._postgres_settled import HOLDER, Settled
from plait.events.stores._postgres_sql import (
    LEASE_LOST,
    POSITION_BITS,
    QUERIES,
    SCHEMA_VERSION,
    STREAM_MOVED,
)
from plait.events.stores._postgres_url import public_url, split_url

__all__ = ["DEFAULT_OUTAGE_SEC", "DEFAULT_SCHEMA", "PostgresStore"]

DEFAULT_SCHEMA = "plait"
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # PostgreSQL truncates at 63 bytes


class PostgresStore(PerAppendStore):
    """An event store in one PostgreSQL schema (created with its tables if missing).

    ``url`` is a libpq URL or conninfo string. The schema is the ``schema`` argument, else the
    URL's ``?schema=NAME`` query parameter, else ``plait``. ``outage_sec`` (else the URL's
    ``?outage_sec=S``, else 30) is how long a call waits for a server that went away
    (docs/failures.md#the-store-blinks). ``connections`` (else the URL's ``?connections=N``,
    else 1) is the most connections its calls use at once, opened as they need them: a process
    that runs many sessions appends theirs side by side (docs/scale.md#connections).
    """

    dense_positions = False

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        clock: Clock = utc_now,
        outage_sec: float | None = None,
        connections: int | None = None,
    ) -> None:
        super().__init__(blob_threshold=blob_threshold, clock=clock)
        conninfo, ours = split_url(url)
        self.url = public_url(url)
        """The URL, with any password masked."""
        self.schema = schema or ours.get("schema") or DEFAULT_SCHEMA
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
        self._waiters: weakref.WeakSet[NotifyWaiter] = weakref.WeakSet()
        self._heads: dict[str, tuple[int, bytes]] = {}  # heads this object wrote, by stream
        self._settled = Settled(f"{self.url} (schema {self.schema})")
        try:
            outage = float(ours.get("outage_sec", DEFAULT_OUTAGE_SEC))
        except ValueError:
            raise StoreUnavailableError(
                f"{self.url}: outage_sec={ours['outage_sec']!r} is not a number of seconds"
            ) from None
        try:
            size = int(ours.get("connections", 1)) if connections is None else connections
        except ValueError:
            size = 0
        if size < 1:
            given = ours.get("connections") if connections is None else connections
            raise StoreUnavailableError(
                f"{self.url}: connections={given!r} is not a number of connections (1 or more)"
            )
        self._link = Link(conninfo, self.url, outage if outage_sec is None else outage_sec, size)
        self._calls = calls = Calls(self._link, self.schema, QUERIES)
        self._announcer = Announcer(self._link.connect, self.channel)
        self.blobs = PostgresBlobs(calls)
        self.leases = PostgresLeases(calls)
        self.inbox = PostgresInbox(calls, self.inbox_channel, self._inbox_listener)
        self.pruning = PostgresPruning(
            calls, self._key, lambda stream: self._heads.pop(stream, None)
        )
        try:
            version = self._link.once(self._open, "cannot open the store")
            if int(version) > SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"{self.url} schema {self.schema}: store schema version {version} is "
                    f"newer than this plait understands ({SCHEMA_VERSION}); upgrade plait"
                )
        except BaseException:
            self._link.close()
            raise

    @property
    def outage_sec(self) -> float:
        """How long a call waits for a server that went away before it raises
        ``StoreUnavailableError``."""
        return self._link.outage_sec

    def _open(self, conn: Connection) -> str:
        return open_schema(conn, self.schema, self._key, self._calls.sql)

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
        self._notify(events)
        return events

    def _peek(self, stream: str, expected_seq: int, epoch: int | None) -> tuple[int, bytes]:
        """Return ``stream``'s head, refusing as the append would if it is not the expected one."""
        peek = self._calls.sql["peek"]
        found = self._calls.run(
            lambda conn: conn.execute(peek, {"stream": stream}, binary=True).fetchone()
        )
        assert found is not None  # one row, whatever is there
        head_seq, head_hash, leased, owner, held_epoch = found
        check_epoch(stream, epoch, (owner, held_epoch) if leased else None)
        check_expected(stream, expected_seq, 0 if head_seq is None else head_seq)
        return (0, GENESIS_HASH) if head_seq is None else (int(head_seq), bytes(head_hash))

    def _write(
        self, stream: str, after: int, prev: bytes, prepared: PreparedAppend, epoch: int | None
    ) -> list[Event]:
        """Write ``prepared``, which follows seq ``after`` of hash ``prev``, in one call; if the
        connection was lost before its answer came, look whether it landed before writing it
        again (its row there, with its hash: docs/failures.md#the-store-blinks)."""
        count = len(prepared.rows)
        if count > 1 << POSITION_BITS:
            raise StoreError(
                f"{self.url}: stream {stream}: cannot append {count} events at once "
                f"(at most {1 << POSITION_BITS})"
            )
        row = prepared.packed()
        blobs = blob_columns(prepared.blobs)
        args = (stream, after, prev, epoch, count, row.hash, row.data, *blobs)
        head = (row.seq, row.hash)  # once written
        sql = self._calls.sql

        def write(conn: Connection) -> int:
            try:
                found = conn.execute(sql["append"], args).fetchone()
            except psycopg.Error as exc:
                self._heads.pop(stream, None)
                detail = exc.diag.message_detail or ""
                if exc.sqlstate == LEASE_LOST:
                    lease = json.loads(detail)
                    check_epoch(stream, epoch, None if lease is None else tuple(lease))
                if exc.sqlstate == STREAM_MOVED:
                    raise ConcurrencyError(stream, after, int(detail)) from None
                raise
            assert found is not None
            return self._wrote(stream, int(found[0]), head)

        def landed(conn: Connection) -> int | None:
            found = conn.execute(sql["placed"], (stream, head[0]), binary=True).fetchone()
            if found is None or bytes(found[1]) != head[1]:
                return None  # not there: the first try did not commit
            return self._wrote(stream, int(found[0]), head)

        events = prepared.placed(self._calls.run(write, landed))
        self._announcer.announce()
        return events

    def _forget(self, stream: str) -> None:
        """Forget the head this object wrote of ``stream`` (a prune removed it)."""
        self._heads.pop(stream, None)

    def _wrote(self, stream: str, first: int, head: tuple[int, bytes]) -> int:
        """Note ``head``, which this object wrote; return ``first``, the position of the
        first event it wrote."""
        if len(self._heads) >= 4096:  # a hint for the streams this object writes now
            self._heads.clear()
        self._heads[stream] = head
        return first

    def _head(self, stream: str) -> tuple[int, bytes]:
        rows = self._calls.query("head", (stream,))
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else (0, GENESIS_HASH)

    def _all_rows(self, after_position: int, limit: int | None, settled: bool) -> list[Packed]:
        # At most a row more than events asked for: the first may hold only positions up to
        # it (``postgres_sql`` keeps only those that hold the first ``limit`` after it).
        rows = None if limit is None else limit + 1
        args = {"after": after_position, "limit": limit, "rows": rows}
        if not settled:
            return self._calls.query("all", args)
        # One round trip: the rows, each with whether committed rows wait above the bound (a
        # row of NULLs but for that, when there are none).
        found = self._calls.query("settled", args)
        self._settled.note(bool(found[0][-1]), self._holder)
        return [row[:-1] for row in found if row[0] is not None]

    def _rows(self, stream: str, after: int, upto: int | None, limit: int | None) -> list[Packed]:
        args = {"stream": stream, "after": after, "limit": limit}
        return self._calls.query("rows", {**args, "upto": 2**62 if upto is None else upto})

    def space(self) -> Space:
        rows = self._calls.run(
            lambda conn: conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0),"
                " coalesce(sum(s.n_dead_tup::float8 / greatest(s.n_live_tup + s.n_dead_tup, 1)"
                " * pg_table_size(c.oid)), 0)"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
                " WHERE n.nspname = %s AND c.relkind = 'r'",
                (self.schema,),
            ).fetchall()
        )
        ((total, dead),) = rows
        return Space(int(total), int(dead), vacuum_hint(self.schema))

    def _last_position(self) -> int:
        found = self._calls.query("last_position")
        return int(found[0][0]) if found else 0

    def _streams(self) -> list[tuple[str, int]]:
        return [(str(stream), int(last)) for stream, last in self._calls.query("streams")]

    def _position_gap(self) -> tuple[int, int] | None:
        return None  # positions are not dense here: nothing to tell from a jump

    def _position_gaps(self) -> list[tuple[int, int]]:
        return []  # positions are not dense here

    def _placed(self, after_position: int, limit: int) -> list[Placed]:
        return []  # no gap to name: positions are not dense here

    def _waiter(self) -> Waiter:
        return self._listener(self.channel, poll=self._poll)

    def _held_back(self) -> bool:
        return self._settled.holding

    def _poll(self) -> float:
        """How soon a subscription must look again without an announcement."""
        return self._settled.poll()

    def _holder(self) -> tuple[Any, ...] | None:
        """The transaction holding the settled bound back (``postgres_settled.HOLDER``)."""
        return self._calls.run(lambda conn: conn.execute(HOLDER).fetchone())

    def _inbox_listener(self, local: Signal, wanted: Callable[[str], bool] | None) -> Waiter:
        """A waiter on the inbox's channel (and ``local``), for ``PostgresInbox``."""
        return self._listener(self.inbox_channel, local, wanted=wanted)

    def _listener(
        self,
        channel: str,
        local: Signal | None = None,
        poll: Callable[[], float] | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> NotifyWaiter:
        """A waiter on ``channel`` (and ``local``), closed with the store."""
        waiter = NotifyWaiter(self._link.connect, self.url, channel, local, poll, wanted)
        self._waiters.add(waiter)
        return waiter

    def close(self) -> None:
        """Close the connection and every live subscription's listener; idempotent."""
        if self.closed:
            return
        super().close()
        self._announcer.close()
        self._link.close()
        for waiter in list(self._waiters):
            waiter.close()
