"""Who owns a session, and what others ask of it: leases and the inbox, in the store.

Several processes may share one store. Each live session has one owner, named by a **lease**
row ``(stream, owner, epoch, expiry)``: a process takes it when it opens or resumes the session,
renews it while it runs, and releases it when it stops. A lease that was not renewed in time has
*lapsed*: another process may take it, and taking it from someone else (or after a release)
raises its **epoch**. Every append of an owner carries its epoch, and the store refuses, in the
append's own transaction, one whose epoch is no longer the stream's (``LeaseLostError``): a
former owner that wakes after its lease was taken cannot add a single event.

The **inbox** holds commands for a session that any process may store (durably, in order): a
task, an interrupt, a conversation's destruction. The owner takes them in order and deletes
each once what it leads to is in the log; a task is queued once by its id, an interrupt acted
on once by its key. See ``docs/processes.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import msgspec

from plait.errors import LeaseLostError
from plait.events.subscription import ConditionWaiter, Signal, Waiter
from plait.events.values import TaskPlan

__all__ = [
    "DEFAULT_LEASE_SEC",
    "ENDED",
    "Command",
    "CommandBody",
    "DestroyConversation",
    "Held",
    "InterruptTask",
    "Lease",
    "Ownership",
    "StoredCommand",
    "SubmitTask",
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


class SubmitTask(msgspec.Struct, frozen=True, tag="submit"):
    """Queue a task (a prompt, a context change, a compaction) in the session."""

    plan: TaskPlan


class InterruptTask(msgspec.Struct, frozen=True, tag="interrupt"):
    """Interrupt the session's running task (if any, when the owner takes the command)."""

    key: str = ""
    """Unique to this interrupt (a random id; ``""``: one stored by an older plait): the owner
    acts on a key once, however often it is stored
    (docs/processes.md#each-command-takes-effect-once)."""


class DestroyConversation(msgspec.Struct, frozen=True, tag="destroy"):
    """Destroy a conversation of the session."""

    conversation_id: str


CommandBody = SubmitTask | InterruptTask | DestroyConversation


class Command(msgspec.Struct, frozen=True):
    """A command as stored: who asked, and what."""

    body: CommandBody
    sender: str = ""
    """The process that stored it (for people)."""


class StoredCommand(msgspec.Struct, frozen=True):
    """A command in the inbox: its place in the inbox's order, and its session."""

    id: int
    stream: str
    command: Command


Held = tuple[str | None, int, float]
"""A lease row as a backend keeps it: ``(owner, epoch, expires)``."""

ENDED: Final = 0.0
"""The expiry a release (or ``expire_lease``) writes: a lease ended on purpose, lapsed at once
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


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Command).decode


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


class Ownership(ABC):
    """The lease and inbox part of the store contract (``EventStore`` inherits it)."""

    def acquire_lease(self, stream: str, owner: str, lease_sec: float) -> Lease:
        """Take ``stream``'s lease for ``owner`` if nobody holds it, it lapsed, or ``owner``
        holds it already (then it is renewed, its epoch kept). Return the lease as it is now:
        held by ``owner`` when taken, else by whoever holds it."""
        return self._acquire([stream], owner, lease_sec)[0]

    def acquire_leases(self, streams: Iterable[str], owner: str, lease_sec: float) -> list[Lease]:
        """Take the leases of ``streams`` as ``acquire_lease`` takes one, all in one
        transaction (a worker adopting many sessions at once: one round trip, not one each);
        return them as they are now, in the order of ``streams``."""
        wanted = list(dict.fromkeys(streams))
        if not wanted:
            return []
        # Row locks taken in one order by every process: two takers never wait on each other.
        found = {lease.stream: lease for lease in self._acquire(sorted(wanted), owner, lease_sec)}
        return [found[stream] for stream in wanted]

    def renew_leases(self, owner: str, lease_sec: float, held: Mapping[str, int]) -> dict[str, int]:
        """Renew the leases of ``held`` (stream -> epoch) that ``owner`` still holds at those
        epochs, lapsed or not, in one statement; return their epochs by stream. A lease missing
        from the answer was taken by another process, or ended on purpose: one released or
        expired is never renewed, so a release stays a release however late a renewal that
        was under way arrives (docs/processes.md#handing-back)."""
        return self._renew(owner, lease_sec, dict(held))

    def release_lease(self, stream: str, owner: str, epoch: int, *, idle: bool = True) -> bool:
        """Give up ``stream``'s lease, if ``owner`` still holds it at ``epoch``; return whether
        it did. ``idle``: nothing waits in the session, so nobody need take it over; else it is
        left lapsed, for a worker to take over and run what waits."""
        return self._release(stream, owner, epoch, idle)

    def expire_lease(self, stream: str, owner: str, epoch: int) -> bool:
        """End ``owner``'s lease of ``stream`` now, if ``owner`` still holds it at ``epoch``;
        return whether it did. For a process that proved ``owner`` dead, which the store
        cannot (docs/processes.md#a-dead-owner-on-this-machine): the lease is left lapsed,
        ``owner`` named in it, so that taking it raises the epoch as after any lapse, and
        ``owner`` could append nothing more if it ran after all."""
        return self._release(stream, owner, epoch, False)  # the row a hand-back leaves

    def leases(self) -> list[Lease]:
        """Every session's lease (a session never owned has none)."""
        return self._leases(None)

    def lease(self, stream: str) -> Lease | None:
        """``stream``'s lease, or ``None`` when it was never owned."""
        found = self._leases(stream)
        return found[0] if found else None

    def put_command(self, stream: str, command: Command) -> int:
        """Store ``command`` for ``stream``'s owner; return its id once it is durable. Made
        again after a lost answer, it is stored once
        (docs/processes.md#each-command-takes-effect-once)."""
        return self._put_command(stream, _encode(command))

    def commands(self, *streams: str) -> list[StoredCommand]:
        """The inbox in order: the commands of ``streams``, or (none named) every session's."""
        rows = self._commands(list(streams) if streams else None)
        return [StoredCommand(cid, found, _decode(data)) for cid, found, data in rows]

    def commands_waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        """A waiter (``token``, ``wait``) woken when any process may have stored a command, or
        when ``also`` moves. With ``sessions``, a command of a session it says no to wakes it
        no more where the store tells whose each command is (PostgreSQL); elsewhere any may."""
        return self._inbox_waiter(also, sessions)

    def drop_commands(self, commands: Iterable[StoredCommand]) -> None:
        """Delete commands the owner has taken (one already gone is ignored)."""
        taken = [(command.stream, command.id) for command in commands]
        if taken:
            self._drop_commands(taken)

    _commanded: Signal

    def hear_commands(self, hear: Callable[[], object]) -> None:
        """Call ``hear`` each time a command is stored through this store object."""
        self._commanded.heard_by(hear)

    def _inbox_waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        """A waiter woken when a command may have been stored (not by every append), or
        ``also`` moves; ``sessions``: whose commands wake it, where the store can tell."""
        return ConditionWaiter(
            self._commanded if also is None else Signal.any_of(self._commanded, also)
        )

    @abstractmethod
    def _acquire(self, streams: list[str], owner: str, lease_sec: float) -> list[Lease]:
        """Take the leases of ``streams`` (sorted, distinct) in one transaction; return
        every one of them as it is now."""

    @abstractmethod
    def _renew(self, owner: str, lease_sec: float, held: dict[str, int]) -> dict[str, int]: ...

    @abstractmethod
    def _release(self, stream: str, owner: str, epoch: int, idle: bool) -> bool: ...

    @abstractmethod
    def _leases(self, stream: str | None) -> list[Lease]: ...

    @abstractmethod
    def _put_command(self, stream: str, data: bytes) -> int: ...

    @abstractmethod
    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]: ...

    @abstractmethod
    def _drop_commands(self, taken: list[tuple[str, int]]) -> None:
        """Delete the commands ``(stream, id)``."""
