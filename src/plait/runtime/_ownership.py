"""A runtime's part in a store shared by several processes (docs/processes.md).

``Owner`` holds this process's leases: it takes one when the runtime opens or resumes a session,
renews them all with one statement every third of ``lease_sec`` (a heartbeat on a ``Timers``
thread of its own, so that nothing slow delays it), and tells a session whose lease another
process took that it is lost. A lease whose holder it proves dead (a process of this machine
that no longer runs, ``liveness``) counts as lapsed at once. Its inbox thread takes the
commands of the sessions it owns, in order, as the store signals them, and hands each to its
session: a task its session holds is not queued again, an interrupt whose key it acted on is
not acted on again (docs/processes.md#each-command-takes-effect-once). It does not wait for a
task to be durable before it hands on the next command: its session says when it is, and the
command is dropped at the thread's next round, with the others durable by then."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import msgspec

from plait._errors import LeaseLostError, PlaitError, SessionClosedError, UnknownConversationError
from plait.events import (
    Command,
    CommandBody,
    ConversationDestroyed,
    DestroyConversation,
    Event,
    InterruptTask,
    Lease,
    Signal,
    StoredCommand,
    SubmitTask,
    TaskEnqueued,
)
from plait.runtime._acks import Ack
from plait.runtime._liveness import new_owner_id, owner_state
from plait.runtime._timers import Timer, Timers

if TYPE_CHECKING:
    from plait._jsonvalue import JsonObject
    from plait.events import EventStore, TaskPlan

__all__ = ["REMEMBERED_INTERRUPTS", "Owned", "Owner", "default_owner_id"]

log = logging.getLogger("plait")

REMEMBERED_INTERRUPTS = 4096
"""How many interrupt keys an owner remembers (about 100 bytes each): far more interrupts than
can be stored again while their sender retries after a lost answer (``outage_sec``)."""


def default_owner_id() -> str:
    """``host:pid:random:where.start``: unique among the processes sharing a store, readable by
    people, and telling a process of the same machine whether its owner still runs
    (``liveness``)."""
    return new_owner_id()


class Owned(Protocol):
    """A session this process holds (its ``SessionHost``): what its owner's threads ask."""

    @property
    def followed(self) -> bool: ...

    @property
    def acks(self) -> set[Ack]: ...

    def tell(self, plan: TaskPlan, ack: Ack) -> None: ...

    def take_place(self) -> bool: ...

    def lose(self, error: PlaitError) -> None: ...

    def interrupt(self) -> None: ...

    def destroy(self, conversation_id: str) -> JsonObject: ...


class Owner:
    """This runtime's leases, their heartbeat, and the inbox of the sessions it owns."""

    def __init__(
        self, store: EventStore, hosts: Mapping[str, Owned], owner_id: str, lease_sec: float
    ) -> None:
        """Own sessions of ``store`` as ``owner_id``, with leases of ``lease_sec``; ``hosts``
        are the sessions this process holds, by id (the runtime's, as they come and go)."""
        self.id = owner_id
        self.lease_sec = lease_sec
        self._hosts = hosts
        self._store = store
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, float]] = {}  # stream -> epoch, when it was taken
        self._taken: set[int] = set()  # commands handed to a session, not yet dropped
        # Destroys acted on whose conversation's end is not yet in the log: the command, and
        # the seq its session's log had before (``_drop_destroyed``).
        self._destroying: dict[int, tuple[StoredCommand, int]] = {}
        self._releasing: set[str] = set()  # leases being released: not lost if not renewed
        # Keys of the interrupts it acted on lately, oldest first (a stored one again is not
        # acted on: docs/processes.md#each-command-takes-effect-once).
        self._interrupted: OrderedDict[str, None] = OrderedDict()
        self._stopping = threading.Event()
        # Handed to their sessions and durable since: dropped from the inbox at the next round.
        self._durable: list[StoredCommand] = []
        self._dropping = Signal()  # a command's task is durable: the inbox thread drops it
        self._looks = Signal()  # ``wake``: the inbox thread reads the inbox
        # Whether a command may wait unread: its next round reads the inbox (not when only
        # drops woke it). Set by ``wake``, a command stored here, and one announced for a
        # session it holds; read and cleared by the inbox thread alone, before it reads.
        self._unread = True
        self._store.inbox.hear(self._stored_here)
        # Woken by its own sessions' commands only, where the store can tell.
        self._waiter = self._store.inbox.waiter(
            Signal.any_of(self._looks, self._dropping), self._announced
        )
        self._thread: threading.Thread | None = None
        self._heartbeat = Timers("plait-heartbeat")
        self._beating: Timer | None = None
        self._renewed_at = 0.0  # (monotonic) when the last renewal that went through was sent
        self._renewing = threading.Lock()  # one renewal at a time, whoever asks

    def start(self) -> None:
        """Start renewing and taking commands (once the runtime is ready to resume)."""
        self._beating = self._heartbeat.every(self.lease_sec / 3, self._beat, "renew leases")
        self._thread = threading.Thread(target=self._run, name="plait-owner", daemon=True)
        self._thread.start()

    def take(self, stream: str) -> int | None:
        """Take ``stream``'s lease; return its epoch, or ``None`` when another process holds it."""
        asked = time.monotonic()
        lease = self._store.leases.acquire(stream, self.id, self.lease_sec)
        return self._held_now(lease, asked)

    def take_all(self, streams: list[str]) -> dict[str, int]:
        """Take the leases of ``streams`` at once (one transaction); return the epochs of
        those taken, by stream: those another process holds are not."""
        asked = time.monotonic()
        leases = self._store.leases.acquire_many(streams, self.id, self.lease_sec)
        taken = {lease.stream: self._held_now(lease, asked) for lease in leases}
        return {stream: epoch for stream, epoch in taken.items() if epoch is not None}

    def _held_now(self, lease: Lease, asked: float) -> int | None:
        """Note ``lease`` as held since ``asked`` if this process took it, or take it from a
        holder proved dead; return its epoch, or ``None`` when another process holds it."""
        stream = lease.stream
        holder = lease.owner if lease.live else None  # a lapsed one was taken, if it could be
        if holder is not None and holder != self.id and owner_state(holder) == "dead":
            # Its holder ran on this machine and runs no more: end its lease (if nobody took
            # it meanwhile) and take it as a lapsed one, the epoch raised
            # (docs/processes.md#a-dead-owner-on-this-machine).
            log.info("session %s: its owner %s is dead; taking it over", stream, holder)
            self._store.leases.expire(stream, holder, lease.epoch)
            lease = self._store.leases.acquire(stream, self.id, self.lease_sec)
        if not lease.held_by(self.id):
            return None
        with self._lock:
            self._held[stream] = (lease.epoch, asked)
        return lease.epoch

    def leases(self) -> list[Lease]:
        """Every session's lease, as this process knows it: one held by a process it proved
        dead is shown lapsed (``take`` takes it at once)."""
        found = self._store.leases.all()
        others = {lease.owner for lease in found if lease.live and lease.owner != self.id}
        # One look per owner, however many leases it holds.
        dead = {owner for owner in others if owner is not None and owner_state(owner) == "dead"}
        return [
            msgspec.structs.replace(lease, remaining_sec=0.0)
            if lease.live and lease.owner in dead
            else lease
            for lease in found
        ]

    @property
    def _safe_sec(self) -> float:
        """How long after a renew was sent its leases are sure to hold (a margin for the
        store's clock running apart from this one)."""
        return self.lease_sec * 0.8

    def still_owns(self, stream: str) -> bool:
        """Whether this process surely still owns ``stream`` (asked before anything outside
        starts): by its last renewal (or its taking), or, past it (the process was paused, the
        store slow), by renewing now (one renewal for all who ask meanwhile)."""
        asked = time.monotonic()
        if self._sure(stream, asked):
            return True
        with self._renewing:
            if not self._sure(stream, asked):  # nobody renewed while it waited
                try:
                    self._renew()
                except PlaitError:
                    return False
        return self._sure(stream, asked)

    def _sure(self, stream: str, now: float) -> bool:
        with self._lock:
            held = self._held.get(stream)
        return held is not None and now < max(self._renewed_at, held[1]) + self._safe_sec

    def release(self, stream: str, *, idle: bool = True) -> None:
        """Give ``stream``'s lease back (``idle``: nothing waits in it). It is held, and
        renewed, until the store has answered: a release that a signal cut (``Stopped``)
        can be made again (docs/processes.md#stopping)."""
        with self._lock:
            held = self._held.get(stream)
            if held is None:
                return
            self._releasing.add(stream)
        try:
            try:
                if not self._store.leases.release(stream, self.id, held[0], idle=idle):
                    log.info("session %s: its lease was not held at epoch %d", stream, held[0])
            except PlaitError as exc:  # it lapses on its own
                log.warning("session %s: releasing its lease failed: %s", stream, exc)
            with self._lock:  # answered (not cut): renewed no more
                if self._held.get(stream) == held:  # not taken anew meanwhile
                    del self._held[stream]
        finally:
            with self._lock:
                self._releasing.discard(stream)

    def forget(self, stream: str) -> None:
        """Stop renewing ``stream``'s lease (another process took it)."""
        with self._lock:
            self._held.pop(stream, None)

    def holds(self, stream: str) -> bool:
        """Whether this process holds ``stream``'s lease."""
        with self._lock:
            return stream in self._held

    def wake(self) -> None:
        """Look at the inbox now (a session was just taken over, or a place may be free)."""
        self._unread = True
        self._looks.notify()

    def _stored_here(self) -> None:
        """A command was stored through this store object (for a session here, maybe)."""
        self._unread = True

    def _announced(self, stream: str) -> bool:
        """Whether a command announced for ``stream`` wakes the inbox thread: one for a
        session it holds, which its next round reads."""
        mine = self.holds(stream)
        if mine:
            self._unread = True
        return mine

    def close(self) -> None:
        """Stop the heartbeat (the leases still held lapse, unless released first), and drop
        the commands whose tasks are durable."""
        self._stopping.set()
        self._heartbeat.close(5.0)
        self._waiter.close()
        if self._thread is not None:
            self._thread.join(5.0)
        if not self._store.closed:
            with contextlib.suppress(PlaitError):  # left to the next owner, which drops them
                self._drop_durable()

    # --- the heartbeat and the inbox thread ----------------------------------------------------

    def _beat(self) -> float | None:
        """Renew the leases; after a failure, try again within a second."""
        try:
            self._renew()
        except PlaitError as exc:  # the store is down: the next beat tries again
            if self._store.closed and self._beating is not None:  # closed under it: done
                self._beating.cancel()
            elif not self._stopping.is_set():
                log.warning("session ownership: renewing leases: %s", exc)
            return min(self.lease_sec / 3, 1.0)
        return None

    def _run(self) -> None:
        """Take the inbox's commands as the store signals them (and, in case a signal was
        missed or a place came free, every third of ``lease_sec``)."""
        every = self.lease_sec / 3
        # A store closed under it (the runtime was not) wakes its waiter at once, for good:
        # nothing raises when nothing is held, so without this test the loop would spin.
        while not self._stopping.is_set() and not self._store.closed:
            try:
                token = self._waiter.token()
                self._drop_durable()
                if self._unread:
                    self._unread = False  # before it reads: a command stored since is read next
                    self._take_commands()
                self._waiter.wait(token, every)
                if self._waiter.token() == token:  # nothing for a while: look all the same
                    self._unread = True
            except PlaitError as exc:  # the store is down: the next round tries again
                if self._store.closed:  # closed under it (the runtime was not): nothing to do
                    return
                if not self._stopping.is_set():
                    log.warning("session ownership: %s", exc)
                self._unread = True
                self._stopping.wait(min(every, 1.0))

    def _renew(self) -> None:
        with self._lock:
            before = dict(self._held)
        asked = time.monotonic()
        # Only what it holds, at its epochs: a lease released meanwhile stays released.
        epochs = {stream: epoch for stream, (epoch, _) in before.items()}
        renewed = self._store.leases.renew(self.id, self.lease_sec, epochs)
        self._renewed_at = asked
        for stream, held in before.items():
            epoch = held[0]
            if renewed.get(stream) == epoch:
                continue
            with self._lock:
                if self._held.get(stream) != held or stream in self._releasing:
                    continue  # released (or being released), or taken anew meanwhile
                del self._held[stream]
            host = self._hosts.get(stream)
            if host is not None:
                host.lose(LeaseLostError(stream, epoch, "it was not renewed in time"))

    def _take_commands(self) -> None:
        with self._lock:
            held = set(self._held)
        self._drop_destroyed(held)
        if not held:
            return
        waiting: set[str] = set()  # passive, no place free: in order, after one that waits
        for stored in self._store.inbox.commands(*held):  # its sessions' only
            with self._lock:
                if stored.id in self._taken:
                    continue
            host = self._hosts.get(stored.stream)
            if host is None or host.followed or stored.stream in waiting:
                continue
            # Never wait for a place here, the heartbeat's thread (an interrupt needs none).
            needs = not isinstance(stored.command.body, InterruptTask)
            if needs and not host.take_place():
                waiting.add(stored.stream)
            else:
                with self._lock:
                    self._taken.add(stored.id)
                self._hand(host, stored)

    def _drop_durable(self) -> None:
        """Drop the submissions whose tasks are in the log since the last round, all at once.
        The thread hands on without waiting for them: a command for another session is not
        held up behind a write (one worker's throughput, bench/workers.py)."""
        with self._lock:
            done, self._durable = self._durable, []
        if not done:
            return
        try:
            self._store.inbox.drop(done)
        except BaseException:
            with self._lock:  # dropped at the next round
                self._durable = done + self._durable
            raise
        with self._lock:
            self._taken.difference_update(stored.id for stored in done)

    def _said(self, stored: StoredCommand, error: BaseException | None) -> None:
        """A submission handed to its session is in the log (``error`` is ``None``): have its
        command dropped; or it is not, and is left for whoever runs the session next (told on
        the thread that recorded it, or failed it)."""
        if isinstance(error, UnknownConversationError):  # destroyed since it was sent
            log.warning("a task from the inbox was not run: %s", error)
            error = None
        elif error is not None and not isinstance(error, SessionClosedError | LeaseLostError):
            log.warning("session ownership: task from command %s: %s", stored.id, error)
        with self._lock:
            if error is None:
                self._durable.append(stored)
            else:
                self._taken.discard(stored.id)
        if error is None:
            self._dropping.notify()

    def _hand(self, host: Owned, stored: StoredCommand) -> None:
        """Hand a command to its session; drop it once what it leads to is in the log (a
        submission: once its ``Ack`` says so, ``_said``)."""
        body = stored.command.body
        try:
            if isinstance(body, SubmitTask):
                try:
                    host.tell(body.plan, Ack(host.acks, functools.partial(self._said, stored)))
                    return
                except UnknownConversationError as exc:  # destroyed since it was sent
                    log.warning("task %s from the inbox not run: %s", body.plan.task_id, exc)
            elif isinstance(body, InterruptTask):
                self._store.inbox.drop([stored])  # at most once
                if self._first_time(body.key):
                    host.interrupt()
            elif isinstance(body, DestroyConversation):
                # Acted on, then dropped once the conversation's end is in the log: an owner
                # that dies before leaves it to the next, which destroys it or finds it gone.
                before = self._store.last_seq(stored.stream)
                done = host.destroy(body.conversation_id).get("ok")
                if done and not self._destroyed(stored.stream, body.conversation_id, before):
                    self._destroying[stored.id] = (stored, before)
                    return
        except (SessionClosedError, LeaseLostError):  # closed or lost: the next owner takes it
            with self._lock:
                self._taken.discard(stored.id)
            return
        except PlaitError:  # the store went away mid-way: taken again on the next round
            with self._lock:
                self._taken.discard(stored.id)
            raise
        self._store.inbox.drop([stored])
        with self._lock:
            self._taken.discard(stored.id)

    def _destroyed(self, stream: str, conversation_id: str, after: int) -> bool:
        """Whether ``stream``'s log past seq ``after`` holds ``conversation_id``'s end."""
        return any(
            isinstance(event.body, ConversationDestroyed)
            and event.conversation_id == conversation_id
            for event in self._store.read(stream, after=after, limit=None, resolve_blobs=False)
        )

    def _drop_destroyed(self, held: set[str]) -> None:
        """Drop the destroys whose conversation's end is now in the log; let go of those of
        sessions no longer held (the next owner takes them)."""
        for command_id, (stored, before) in list(self._destroying.items()):
            body = stored.command.body
            assert isinstance(body, DestroyConversation)
            if stored.stream in held:
                if not self._destroyed(stored.stream, body.conversation_id, before):
                    continue
                self._store.inbox.drop([stored])
            del self._destroying[command_id]
            with self._lock:
                self._taken.discard(command_id)

    def _first_time(self, key: str) -> bool:
        """Whether the interrupt of ``key`` was not acted on lately (and note it was now)."""
        if not key:  # stored by an older plait: it has none
            return True
        if key in self._interrupted:
            log.info("an interrupt taken already (key %s) was stored again: not acted on", key)
            return False
        self._interrupted[key] = None
        if len(self._interrupted) > REMEMBERED_INTERRUPTS:
            self._interrupted.popitem(last=False)
        return True

    def drop_taken(self, stream: str, past: list[Event]) -> None:
        """Drop ``stream``'s queued commands whose task ``past`` already holds: a former owner
        recorded it and stopped before it dropped the command."""
        enqueued = {e.task_id for e in past if isinstance(e.body, TaskEnqueued)}
        if not enqueued:  # none can be (a session's first task): no need to read the inbox
            return
        done = [
            stored
            for stored in self._store.inbox.commands(stream)
            if isinstance(stored.command.body, SubmitTask)
            and stored.command.body.plan.task_id in enqueued
        ]
        self._store.inbox.drop(done)

    def send(self, stream: str, body: CommandBody) -> int:
        """Store a command for ``stream``'s owner; return its id once durable."""
        return self._store.inbox.put(stream, Command(body, sender=self.id))
