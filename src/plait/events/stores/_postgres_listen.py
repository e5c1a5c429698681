"""``NotifyWaiter``: wakes a ``PostgresStore`` subscription or owner on ``NOTIFY``.

This is an internal part of ``PostgresStore``, not part of the public API.

It ``LISTEN``s on a connection of its own. A lost connection is opened again on the next
wait, and until it is, every wait counts as a notification: notifications may have been lost
meanwhile, so the reader reads again, and the store's reads wait for the server as their own
calls do (docs/failures.md#the-store-blinks). The waiter never raises for a lost connection.
Given ``poll``, a wait also ends after the seconds it says, so the reader looks again for what
no notification announced. Given ``wanted``, a notification counts only if its payload is one
``wanted`` takes (the inbox announces each command with its session: an owner is woken by its
own sessions' commands only). A move of ``local`` (this process's) ends a wait at once: the
waiter listens on a socket pair beside its connection, which the move writes to.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from plait._errors import StoreError, StoreUnavailableError
from plait.events._subscription import Signal, Waiter
from plait.events.stores._postgres_announce import LISTENING_SQL, listening
from plait.events.stores._postgres_link import Connection, text_of

__all__ = ["NotifyWaiter"]


class NotifyWaiter(Waiter):
    """Counts ``NOTIFY``s on a channel, received on a connection of its own.

    ``LISTEN`` runs at construction, before the subscription's first read, so a commit falling
    between a read and the wait is still noticed. psycopg must not close a connection another
    thread is waiting on, so ``wait`` blocks in short steps and closing happens between them.
    """

    STEP_SEC = 0.1

    def __init__(
        self,
        connect: Callable[[], Connection],
        url: str,
        channel: str,
        local: Signal | None = None,
        poll: Callable[[], float] | None = None,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        self._connect = connect
        self._url = url
        self._channel = channel
        self._local = local  # moved in this process (``Owner.wake``): ends a wait at once
        self._poll = poll
        self._wanted = wanted
        self._io = threading.Lock()
        self._closed = False
        self._count = 0
        self._conn: Connection | None = self._listen()
        self._woken: tuple[socket.socket, socket.socket] | None = None
        if local is not None:
            self._woken = socket.socketpair()
            for end in self._woken:
                end.setblocking(False)
            local.heard_by(self._wake)

    def _listen(self) -> Connection:
        conn = self._connect()
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            conn.execute(LISTENING_SQL, listening(self._channel))  # announcers look for it
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"{self._url}: cannot LISTEN: {text_of(exc)}") from exc
        return conn

    def _wake(self) -> None:
        """``local`` moved: end a wait under way (from the moving thread)."""
        if self._woken is not None:
            with contextlib.suppress(OSError):  # full (a wake is pending) or closed
                self._woken[1].send(b"\0")

    def _receive(self, timeout: float) -> None:
        """Count the notifications arriving within ``timeout`` (0: only those pending), or
        until ``local`` moves."""
        with self._io:
            try:
                if self._closed:
                    return
                if self._conn is None or self._conn.broken:
                    self._relisten(timeout)
                    return
                if self._take() or timeout <= 0:
                    return
                ends = [self._conn.fileno()]
                if self._woken is not None:
                    ends.append(self._woken[0].fileno())
                select.select(ends, [], [], timeout)
                if self._woken is not None:
                    with contextlib.suppress(OSError):  # drained
                        while self._woken[0].recv(4096):
                            pass
                self._take()
            except psycopg.Error as exc:
                if self._conn is not None and not self._conn.broken:
                    raise StoreError(f"{self._url}: LISTEN failed: {text_of(exc)}") from exc
                self._count += 1  # listen again on the next call; the reader re-reads meanwhile
            finally:
                if self._closed and self._conn is not None:
                    self._conn.close()

    def _take(self) -> bool:
        """Count the notifications that have arrived (not waiting for any); return whether
        one counted."""
        assert self._conn is not None
        before = self._count
        for notify in self._conn.notifies(timeout=0):
            if self._wanted is None or self._wanted(notify.payload):
                self._count += 1
        return self._count != before

    def _relisten(self, timeout: float) -> None:
        """Listen on a new connection; if the server is away, wait a step (not to spin) and
        let the reader read, which waits for the server or says it is gone."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        try:
            self._conn = self._listen()
        except StoreUnavailableError:
            time.sleep(min(timeout, self.STEP_SEC))  # a pause between two connection attempts
        self._count += 1  # notifications may have been lost: make the reader look

    def token(self) -> int:
        """Return how many notifications (reconnections, local moves) this waiter has seen."""
        self._receive(0)
        return self._seen()

    def _seen(self) -> int:
        return self._count + (self._local.count if self._local is not None else 0)

    def wait(self, token: int, timeout: float | None) -> None:
        """Block until a notification arrives after ``token``, ``timeout`` passes (or the
        waiter's ``poll`` time), or close."""
        if self._poll is not None:
            timeout = self._poll() if timeout is None else min(timeout, self._poll())
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
        self._wake()
        with self._io:  # a waiting thread holds it for at most STEP_SEC
            if self._conn is not None:
                self._conn.close()
            if self._woken is not None:
                for end in self._woken:
                    end.close()
