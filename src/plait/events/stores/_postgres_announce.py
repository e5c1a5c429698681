"""``Announcer``: tells a ``PostgresStore``'s subscribers, by ``NOTIFY``, that appends committed.

This is an internal part of ``PostgresStore``, not part of the public API.

A ``NOTIFY`` inside an append's transaction would make every append of every session commit
one at a time: PostgreSQL holds one lock per database from a notifying transaction's
pre-commit to its end, to keep its queue in commit order. So appends are announced after they
commit, by a thread of the store with a connection of its own, at most one every ``GAP_SEC``:
appends that commit meanwhile share the next one. (An announcement is a transaction, and takes
that lock: one per append would cost each append a second commit.) A process killed between a
commit and its announcement leaves it to subscribers' periodic look (``NotifyWaiter``'s
``poll``).

Nor is a channel announced on that no one listens to: each ``NotifyWaiter`` holds a shared
advisory lock named after its channel (``listening``) for as long as its connection lives, and
the announcer looks for one at most every ``LOOK_SEC``. Sixteen writers with no subscriber
would otherwise send a ``NOTIFY`` each every ``GAP_SEC``, a transaction for every append or two
(bench/pg_concurrency.py). A subscriber that starts between two looks is woken by its own
periodic look until the next (docs/event-log.md#subscriptions).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable

import psycopg

from plait._errors import StoreUnavailableError
from plait.events.stores._postgres_link import Connection

__all__ = ["CLOSE_WAIT_SEC", "GAP_SEC", "LISTENING_SQL", "LOOK_SEC", "Announcer", "listening"]

CLOSE_WAIT_SEC = 1.0
"""How long closing waits for an announcement on its way."""

GAP_SEC = 0.001
"""The least time between two announcements of one store object: what it adds, at most, to
the time a subscriber takes to see an append. At 5 ms a worker's task ended about 2.5 ms
before a front end heard of it, on average (bench/workers.py): appends come that often."""
LOOK_SEC = 0.25
"""How long the announcer trusts what it last found of the channel's listeners."""
LISTENING_SQL = "SELECT pg_advisory_lock_shared(%s, %s)"
"""Taken by a listener, on its listening connection, for as long as it lives."""
_LISTENED_SQL = (
    "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
    "AND classid = %s AND objid = %s AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()))"
)
_CLASS = 0x504C
"""The first key of every plait listener's lock (``listening``)."""


def listening(channel: str) -> tuple[int, int]:
    """The keys of the advisory lock a listener on ``channel`` holds (both positive, as
    ``pg_locks`` shows them)."""
    return _CLASS, zlib.crc32(channel.encode()) & 0x7FFFFFFF


class Announcer:
    """Sends ``NOTIFY channel`` once after each run of ``announce`` calls; closed with its
    store. Failures are dropped: a subscriber looks again within its ``poll_sec``."""

    def __init__(self, connect: Callable[[], Connection], channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._due = threading.Event()
        self._closing = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._listened = False
        self._looked = -LOOK_SEC  # monotonic time of the last look for listeners

    def announce(self) -> None:
        """Have the appends committed so far announced (soon, on the announcer's thread)."""
        if self._thread is None:
            with self._start:
                if self._thread is None and not self._closed:
                    self._thread = threading.Thread(
                        target=self._run, name="plait-announcer", daemon=True
                    )
                    self._thread.start()
        self._due.set()

    def _run(self) -> None:
        conn: Connection | None = None
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._closed:
                    return
                try:
                    conn = conn if conn is not None and not conn.broken else self._connect()
                    if self._heard(conn):
                        conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
                except (psycopg.Error, StoreUnavailableError):
                    if conn is not None:
                        conn.close()
                    conn = None
                self._closing.wait(GAP_SEC)  # appends committing meanwhile share the next
        finally:
            if conn is not None:
                conn.close()

    def _heard(self, conn: Connection) -> bool:
        """Whether a listener is on the channel, as found at most ``LOOK_SEC`` ago."""
        now = time.monotonic()
        if now - self._looked >= LOOK_SEC:
            found = conn.execute(_LISTENED_SQL, listening(self._channel)).fetchone()
            self._listened = bool(found and found[0])
            self._looked = now
        return self._listened

    def close(self) -> None:
        """Stop the thread (an announcement on its way is sent first); idempotent. Waits for it
        ``CLOSE_WAIT_SEC`` at most: one connecting to a server that went away ends on its own,
        at its connect timeout (it holds nothing a process waits for)."""
        with self._start:
            self._closed = True
            thread = self._thread
        self._closing.set()
        self._due.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_SEC)
