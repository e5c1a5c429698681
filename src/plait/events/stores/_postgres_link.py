"""``Link``: the connection of a ``PostgresStore``, reopened while the server blinks.

This is an internal part of ``PostgresStore``, not part of the public API.

PostgreSQL drops connections: a failover, a restart, an idle reaper, an administrator's
``pg_terminate_backend``. A call whose connection is lost is made again on a new one, after a
capped exponential backoff, for as long as the server has been away less than ``outage_sec``
(docs/failures.md#the-store-blinks); past it, the call raises ``StoreUnavailableError``.

Making a call again is safe only if making it twice is: a read, a lease taken or renewed by
the same owner, a release. A write whose commit may have happened before the connection went
(its answer lost) passes ``landed``: on the new connection, it first looks for what the first
try would have written, and returns that instead of writing it again. An append is fenced by
its epoch and chained to the head it expects, so an append made again either lands once or is
refused (``ConcurrencyError``, ``LeaseLostError``), never doubled.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from plait._errors import StoreError, StoreUnavailableError

__all__ = ["DEFAULT_OUTAGE_SEC", "Connection", "Link", "text_of"]

log = logging.getLogger("plait")

Connection = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

DEFAULT_OUTAGE_SEC = 30.0
"""How long the server may be away before a call gives up: three default leases (10 s)."""
FIRST_BACKOFF_SEC = 0.1
"""The wait before the second reconnection (the first is at once: a dropped connection,
with the server up, comes back in milliseconds); each later wait doubles it."""
MAX_BACKOFF_SEC = 2.0
"""The longest wait between two reconnections (a restart is seen within it)."""
_LOST_STATES = ("08", "57P")  # connection exceptions; the server shutting down or starting up


def text_of(exc: BaseException) -> str:
    """One line saying what ``exc`` says."""
    return " ".join(str(exc).split()) or type(exc).__name__


def connection_lost(conn: Connection, exc: psycopg.Error) -> bool:
    """Whether ``exc`` on ``conn`` means the connection is gone (not a refused statement)."""
    return conn.broken or (exc.sqlstate or "").startswith(_LOST_STATES)


class Link:
    """Up to ``size`` autocommit connections, each used by one call at a time and opened as
    calls need them; one that is lost is reopened.

    Calls of different threads go out side by side, on connections of their own: appends of
    different sessions do not wait on one another's round trips, and the server commits them
    together (docs/scale.md#connections). A call made inside another on one thread (a
    ``landed`` look) uses its connection."""

    def __init__(
        self, conninfo: str, url: str, outage_sec: float = DEFAULT_OUTAGE_SEC, size: int = 1
    ) -> None:
        self._conninfo = conninfo
        self.url = url
        """The store's URL, its password masked, for messages."""
        self.outage_sec = outage_sec
        """How long the server may be away before a call raises ``StoreUnavailableError``."""
        self.size = size
        """The most connections it opens."""
        self._closing = threading.Event()  # ends a backoff at once
        self._down_since: float | None = None  # (monotonic) since when calls found it away
        self._free = threading.Condition()  # guards the three below; told when one is free
        self._idle: list[Connection] = [self.connect()]
        self._open = 1  # idle or in use
        self._here = threading.local()  # the connection this thread's call uses

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    def connect(self) -> Connection:
        """Open an autocommit connection (by default: 10 s connect timeout, named plait)."""
        try:
            extra: dict[str, str | int] = {"connect_timeout": 10, "application_name": "plait"}
            given = conninfo_to_dict(self._conninfo)
            defaults = {key: value for key, value in extra.items() if key not in given}
            return psycopg.connect(make_conninfo(self._conninfo, **defaults), autocommit=True)
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"{self.url}: cannot connect to PostgreSQL: {text_of(exc)}"
            ) from exc

    def once(self, call: Callable[[Connection], T], what: str) -> T:
        """Make ``call`` once, on a connection as it is (opening the store: a server that
        is not there is said at once, not waited for)."""
        with self._using() as held:
            try:
                return call(held[0])
            except psycopg.Error as exc:
                raise StoreUnavailableError(f"{self.url}: {what}: {text_of(exc)}") from exc

    def run(
        self,
        call: Callable[[Connection], T],
        error: Callable[[psycopg.Error], StoreError],
        *,
        landed: Callable[[Connection], T | None] | None = None,
    ) -> T:
        """Make ``call`` on a live connection, again on a new one if the connection is lost
        (after ``landed``, if given, found nothing of the first try: ``None``); a refusal
        becomes ``error(exc)``."""
        unsure = False  # a try that may have committed was cut
        backoff = 0.0
        with self._using() as held:
            while True:
                if self._closing.is_set():
                    raise StoreError(f"{self.url}: the store is closed")
                try:
                    conn = self._live(held)
                    found = landed(conn) if unsure and landed is not None else None
                    result = call(conn) if found is None else found
                except StoreUnavailableError as exc:  # reconnecting failed: the server is away
                    backoff = self._back_off(exc, backoff)
                    continue
                except psycopg.Error as exc:
                    if not connection_lost(held[0], exc):
                        raise error(exc) from exc
                    unsure = True
                    backoff = self._back_off(exc, backoff)
                    continue
                except BaseException:
                    # Cut mid-statement (a signal's ``Stopped``; psycopg cancels the statement
                    # only for ``KeyboardInterrupt``): the connection still waits for its
                    # answer, and would refuse every later call. The next call opens a new one.
                    if held[0].pgconn.transaction_status != TransactionStatus.IDLE:
                        held[0].close()
                    raise
                if self._down_since is not None:
                    away = time.monotonic() - self._down_since
                    log.info("%s: connected again after %.1f s", self.url, away)
                    self._down_since = None
                return result

    @contextlib.contextmanager
    def _using(self) -> Iterator[list[Connection]]:
        """A connection for this thread's call, in a list its call may replace it in: the one
        an enclosing call of this thread uses, or one of its own, given back after."""
        mine: list[Connection] | None = getattr(self._here, "held", None)
        if mine is not None:  # a call inside a call: the same connection
            yield mine
            return
        held = [self._take()]
        self._here.held = held
        try:
            yield held
        finally:
            self._here.held = None
            self._give_back(held[0])

    def _take(self) -> Connection:
        """An idle connection, or a new one while fewer than ``size`` are open, or the next
        one given back."""
        with self._free:
            while not self._idle and self._open >= self.size and not self._closing.is_set():
                self._free.wait()
            if self._closing.is_set():
                raise StoreError(f"{self.url}: the store is closed")
            if self._idle:
                return self._idle.pop()
            self._open += 1
        try:
            return self.connect()
        except BaseException:
            with self._free:
                self._open -= 1
                self._free.notify()
            raise

    def _give_back(self, conn: Connection) -> None:
        with self._free:
            if self._closing.is_set():
                conn.close()
            else:
                self._idle.append(conn)
            self._free.notify()

    def _live(self, held: list[Connection]) -> Connection:
        if held[0].broken or held[0].closed:  # lost, or closed as a call was cut
            held[0].close()
            held[0] = self.connect()
        return held[0]

    def _back_off(self, exc: Exception, backoff: float) -> float:
        """Wait ``backoff`` before the next try, or raise if the server has been away for
        ``outage_sec``; return the wait after it."""
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            log.warning("%s: connection lost, reconnecting: %s", self.url, text_of(exc))
        away = now - self._down_since
        if away >= self.outage_sec:
            raise StoreUnavailableError(
                f"{self.url}: connection lost, not back within {self.outage_sec:g} s "
                f"(outage_sec): {text_of(exc)}"
            ) from exc
        self._closing.wait(min(backoff, self._down_since + self.outage_sec - now))
        return min(max(backoff * 2, FIRST_BACKOFF_SEC), MAX_BACKOFF_SEC)

    def close(self) -> None:
        """Close the connections (one in use, once its call ends); a call waiting to
        reconnect ends at once; idempotent."""
        self._closing.set()
        with self._free:
            for conn in self._idle:
                conn.close()
            self._idle.clear()
            self._free.notify_all()
