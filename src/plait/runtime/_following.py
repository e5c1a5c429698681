"""``Followers``: the sessions a runtime follows while other processes own them
(docs/processes.md).

One thread and one subscription to the log serve them all, however many: it hands each event
of a followed session to that handle's live feeds, in log order. A job of the runtime's
``Timers`` reads all leases at once every ``POLL_SEC`` and has the runtime take over a followed
session whose lease is free (its owner handed it back, or died: the lease lapsed, or its owner
ran on this machine and is gone).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from plait._errors import PlaitError
from plait.events import Subscription

if TYPE_CHECKING:
    from plait.actors import Journal
    from plait.events import EventStore, Lease
    from plait.runtime._timers import Timer, Timers

__all__ = ["Followed", "Followers"]

log = logging.getLogger("plait")


class Followed(Protocol):
    """A followed session (its ``SessionHost``): what the followers need of it."""

    @property
    def session_id(self) -> str: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def takes_over(self) -> bool: ...


class Followers:
    """Feeds the handles of sessions owned elsewhere from the log; takes them over when free."""

    POLL_SEC = 0.5
    """How often the leases of followed sessions are looked at."""

    def __init__(
        self,
        store: EventStore,
        leases: Callable[[], list[Lease]],
        take_over: Callable[[str], object],
        timers: Timers,
    ) -> None:
        """``leases()`` reads every lease as this process knows them (``Owner.leases``: a dead
        owner's shown lapsed); ``take_over(session_id)`` owns a followed session whose lease
        is free; ``timers`` runs the look at the leases."""
        self._leases = leases
        self._take_over = take_over
        self._timers = timers
        self._looking: Timer | None = None
        self._store = store
        self._lock = threading.Lock()  # delivering to the handles, and adding or removing one
        self._hosts: dict[str, Followed] = {}
        self._subscription: Subscription | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def add(self, host: Followed, after_position: int) -> None:
        """Follow ``host``'s session, whose feeds have had its log up to ``after_position``."""
        with self._lock:
            self._hosts[host.session_id] = host
            if self._subscription is None:
                # From no later than the last settled position: on PostgreSQL an append of
                # another session begun earlier may still commit below ``after_position``
                # (docs/event-log.md#streams-seq-and-position). What comes twice is dropped
                # by seq (``journal.deliver``).
                start = min(after_position, self._store.last_position())
                self._subscription = self._store.subscribe(start)
                self._thread = threading.Thread(target=self._run, name="plait-follow", daemon=True)
                self._thread.start()
                self._looking = self._timers.every(self.POLL_SEC, self._look, "take over")
            elif after_position < self._subscription.position:  # what came in between
                journal = host.journal
                journal.deliver(self._store.read(journal.stream, after=journal.last_seq))

    def remove(self, host: Followed) -> None:
        """Stop following ``host``'s session (taken over here, or its handle closed)."""
        with self._lock:
            if self._hosts.get(host.session_id) is host:
                del self._hosts[host.session_id]

    def close(self) -> None:
        """Stop the thread, the look at the leases and the subscription."""
        self._stopping.set()
        if self._looking is not None:
            self._looking.cancel()
        if self._subscription is not None:
            self._subscription.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        assert self._subscription is not None
        subscription = self._subscription
        while not self._stopping.is_set():
            try:
                event = subscription.get()  # ``close`` wakes it (closing the subscription)
                if event is not None:
                    with self._lock:
                        host = self._hosts.get(event.stream)
                        if host is not None:
                            host.journal.deliver([event])
            except PlaitError as exc:  # the store is down: look again soon
                if self._store.closed:
                    return
                if not self._stopping.is_set():
                    log.warning("following sessions: %s", exc)
                self._stopping.wait(self.POLL_SEC)

    def _look(self) -> None:
        """``_take_free``, on the timers' thread: a store error is logged, and the next look
        tries again."""
        try:
            self._take_free()
        except PlaitError as exc:
            if self._store.closed and self._looking is not None:
                self._looking.cancel()
            elif not self._stopping.is_set():
                log.warning("following sessions: %s", exc)

    def _take_free(self) -> None:
        """Take over the followed sessions whose lease is free."""
        with self._lock:
            wanted = {s: h for s, h in self._hosts.items() if h.takes_over}
        if not wanted:
            return
        live = {lease.stream for lease in self._leases() if lease.live}
        for stream in wanted:
            if stream not in live:
                self._take_over(stream)
