"""Who owns a session: its lease, a part of every store (``EventStore.leases``).

Several processes may share one store. Each live session has one owner, named by a **lease**
row ``(stream, owner, epoch, expiry)``: a process takes it when it opens or resumes the session,
renews it while it runs, and releases it when it stops. A lease that was not renewed in time has
*lapsed*: another process may take it, and taking it from someone else (or after a release)
raises its **epoch**. Every append of an owner carries its epoch, and the store refuses, in the
append's own transaction, one whose epoch is no longer the stream's (``LeaseLostError``,
``check_epoch``): a former owner that wakes after its lease was taken cannot add a single
event. See ``docs/processes.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from plait._errors import LeaseLostError

__all__ = [
    "DEFAULT_LEASE_SEC",
    "ENDED",
    "Held",
    "Lease",
    "Leases",
    "check_epoch",
    "taken",
]

DEFAULT_LEASE_SEC: Final = 10.0
"""How long a lease lasts unless renewed: the longest a session waits for a new owner after
its owner died."""


class Lease(msgspec.Struct, frozen=True):
    """A session's lease, as the store holds it."""

    stream: str
    """The session."""
    owner: str | None
    """The process holding it (``None``: released)."""
    epoch: int
    """Raised each time the session changes hands; appends of an older epoch are refused."""
    remaining_sec: float
    """Seconds until it lapses, by the store's clock (0 or less: lapsed)."""

    @property
    def live(self) -> bool:
        """Whether a process holds it and has renewed it in time."""
        return self.owner is not None and self.remaining_sec > 0

    def held_by(self, owner: str) -> bool:
        """Whether ``owner`` holds it (lapsed or not: until someone takes it, it is theirs)."""
        return self.owner == owner


Held = tuple[str | None, int, float]
"""A lease row as a backend keeps it: ``(owner, epoch, expires)``."""

ENDED: Final = 0.0
"""The expiry a release (or ``Leases.expire``) writes: a lease ended on purpose, lapsed at once
and never renewed again (a lease that lapsed by time keeps its expiry, and its owner may renew
it until another process takes it)."""


def taken(found: Held, owner: str, now: float, lease_sec: float) -> Held:
    """The lease after ``owner`` asks for it at ``now``: taken if nobody holds it, it lapsed,
    or it is ``owner``'s already (renewed, its epoch kept); else as ``found``. Taking it from
    someone else, or after a release, raises the epoch."""
    holder, epoch, expires = found
    if holder is not None and holder != owner and expires > now:
        return found
    return owner, epoch + (holder != owner), now + lease_sec


def check_epoch(stream: str, epoch: int | None, lease: tuple[str | None, int] | None) -> None:
    """Refuse an append of ``epoch`` to ``stream`` (``LeaseLostError``) unless it is the epoch
    of ``lease`` (owner, epoch)."""
    if epoch is None or (lease is not None and lease[1] == epoch and lease[0] is not None):
        return
    if lease is None:
        raise LeaseLostError(stream, epoch, "the session has no lease")
    owner, now = lease
    holder = f"now epoch {now}, held by {owner}" if owner else f"released at epoch {now}"
    raise LeaseLostError(stream, epoch, holder)


class Leases(ABC):
    """A store's leases: who owns each session, at which epoch, until when."""

    def acquire(self, stream: str, owner: str, lease_sec: float) -> Lease:
        """Take ``stream``'s lease for ``owner`` if nobody holds it, it lapsed, or ``owner``
        holds it already (then it is renewed, its epoch kept). Return the lease as it is now:
        held by ``owner`` when taken, else by whoever holds it."""
        return self._acquire([stream], owner, lease_sec)[0]

    def acquire_many(self, streams: Iterable[str], owner: str, lease_sec: float) -> list[Lease]:
        """Take the leases of ``streams`` as ``acquire`` takes one, all in one transaction (a
        worker adopting many sessions at once: one round trip, not one each); return them as
        they are now, in the order of ``streams``."""
        wanted = list(dict.fromkeys(streams))
        if not wanted:
            return []
        # Row locks taken in one order by every process: two takers never wait on each other.
        found = {lease.stream: lease for lease in self._acquire(sorted(wanted), owner, lease_sec)}
        return [found[stream] for stream in wanted]

    def renew(self, owner: str, lease_sec: float, held: Mapping[str, int]) -> dict[str, int]:
        """Renew the leases of ``held`` (stream -> epoch) that ``owner`` still holds at those
        epochs, lapsed or not, in one statement; return their epochs by stream. A lease missing
        from the answer was taken by another process, or ended on purpose: one released or
        expired is never renewed, so a release stays a release however late a renewal that
        was under way arrives (docs/processes.md#handing-back)."""
        return self._renew(owner, lease_sec, dict(held))

    def release(self, stream: str, owner: str, epoch: int, *, idle: bool = True) -> bool:
        """Give up ``stream``'s lease, if ``owner`` still holds it at ``epoch``; return whether
        it did. ``idle``: nothing waits in the session, so nobody need take it over; else it is
        left lapsed, for a worker to take over and run what waits."""
        return self._release(stream, owner, epoch, idle)

    def expire(self, stream: str, owner: str, epoch: int) -> bool:
        """End ``owner``'s lease of ``stream`` now, if ``owner`` still holds it at ``epoch``;
        return whether it did. For a process that proved ``owner`` dead, which the store
        cannot (docs/processes.md#a-dead-owner-on-this-machine): the lease is left lapsed,
        ``owner`` named in it, so that taking it raises the epoch as after any lapse, and
        ``owner`` could append nothing more if it ran after all."""
        return self._release(stream, owner, epoch, False)  # the row a hand-back leaves

    def all(self) -> list[Lease]:
        """Every session's lease (a session never owned has none)."""
        return self._leases(None)

    def get(self, stream: str) -> Lease | None:
        """``stream``'s lease, or ``None`` when it was never owned."""
        found = self._leases(stream)
        return found[0] if found else None

    @abstractmethod
    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        """Take the leases of ``streams`` (sorted, distinct) in one transaction; return
        every one of them as it is now."""

    @abstractmethod
    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]:
        """Renew the leases of ``held`` that ``owner`` holds at those epochs and that were
        not ended on purpose; return their epochs by stream."""

    @abstractmethod
    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool:
        """If ``owner`` holds ``stream``'s lease at ``epoch``, end it (``ENDED``), leaving it
        to nobody (``idle``) or to ``owner`` (lapsed); return whether it did."""

    @abstractmethod
    def _leases(self, stream: str | None) -> list[Lease]:
        """Every lease (``stream``'s only, if given), by stream."""
