"""``SessionHost``: the one owner of a session's life in this process.

It holds the session's state (a ``Life``: docs/processes.md#a-sessions-life), its actors,
servers and journal, and changes them only through the named transitions: own (start the
actors in a place), passivate, take over, follow again, drain and hand back, close, fail, lose.
A session's verbs are whole procedures here: ``close``, ``release``, ``interrupt``, ``destroy``,
and ``lose`` (a failure, or another owner). ``SessionHandle`` is its public front and calls
them; the runtime's parts (sessions, the owner's heartbeat, followers, replay's driver) call
them and the transitions and read its state, and never reach into each other's private
members.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, cast

import pykka

from plait._errors import (
    LeaseLostError,
    PlaitError,
    SessionClosedError,
    SessionFailedError,
    StoreError,
    StoreUnavailableError,
    UnknownConversationError,
)
from plait._jsonvalue import JsonObject
from plait.actors import (
    ConversationDeps,
    Destroy,
    Enqueue,
    Feed,
    GetQueue,
    Interrupt,
    Journal,
    McpPoolRef,
    Session,
    StartNext,
    Stop,
)
from plait.events import DestroyConversation, Event, InterruptTask, SessionClosed, SubmitTask
from plait.events.projections import QueueSnapshot
from plait.runtime._acks import ACK_WAIT_SEC, Ack
from plait.runtime._life import Life, State
from plait.runtime._outcome import FOLLOWED, await_outcome
from plait.runtime._recovery import OpenCalls, Rerun, forced_close
from plait.runtime._steps import every_step
from plait.runtime._supervision import STOP_SEC, failure_end, went_away

if TYPE_CHECKING:
    from plait.events import EventStore, HistorySettings, TaskPlan
    from plait.events.projections import ConversationInfo
    from plait.runtime._admission import Admission
    from plait.runtime._following import Followers
    from plait.runtime._gate import TaskGate
    from plait.runtime._offload import Offload
    from plait.runtime._ownership import Owner
    from plait.runtime._settings import RuntimeSettings

__all__ = ["CLOSED_BY", "ActorsFor", "Front", "Hosting", "SessionHost"]

log = logging.getLogger("plait")

CLOSED_BY = "closed by the embedder"
"""What a close records as its reason unless its caller says who closed it."""

ActorsFor = Callable[[Journal, list[Event]], tuple[McpPoolRef | None, ConversationDeps]]
"""Starts a session's ``McpPool`` (``None`` when it has no tools beside the built-ins) and
makes what its conversations share, for its journal and past."""


class Hosting(Protocol):
    """What a session's host, its handle, and the runtime's ``Sessions`` use of the runtime
    that holds them."""

    @property
    def store(self) -> EventStore: ...

    @property
    def settings(self) -> RuntimeSettings: ...

    @property
    def owner(self) -> Owner: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def followers(self) -> Followers: ...

    @property
    def gate(self) -> TaskGate: ...

    @property
    def off_loop(self) -> Offload: ...

    @property
    def history(self) -> HistorySettings: ...


class Front(Protocol):
    """A session's public front (its ``SessionHandle``), as its host asks it."""

    def conversations(self) -> list[ConversationInfo]: ...


H = TypeVar("H", bound=Front)


class SessionHost(Generic[H]):
    """One session's life in this process: its state, its actors, and their transitions."""

    def __init__(
        self,
        runtime: Hosting,
        session_id: str,
        root_id: str,
        past: list[Event],
        actors_for: ActorsFor,
        front: Callable[[SessionHost[H]], H],
        ended: Callable[[SessionHost[H]], object],
        *,
        epoch: int | None = None,
        followed: State | None = None,
    ) -> None:
        """Own the session from ``past`` (its lease taken with ``epoch``), or follow it
        (``followed``: ``FOLLOWED``, to take it over once free, or ``WATCHED``, never);
        ``actors_for`` starts its actors' shared parts; ``front(host)`` makes its public
        front; ``ended(host)`` is told once the session has ended here (closed, handed back,
        failed, lost)."""
        self.runtime = runtime
        self.session_id = session_id
        self.root_conversation_id = root_id
        self.journal = Journal(
            runtime.store,
            session_id,
            past,
            epoch,
            on_idle=self._went_idle,
            on_lost=self.lose,
            may_act=lambda: runtime.owner.still_owns(session_id),
            signer=runtime.settings.signer,
        )
        """Its journal, which tells it what it must hear (idle, lost) and asks it whether it
        may still act: made here, once, with those (docs/processes.md#a-sessions-life)."""
        self.life = Life(self.session_id, State.PASSIVE if followed is None else State.FOLLOWED)
        """Its state, and the facts that go with it: only its transitions change them."""
        if followed is State.WATCHED:
            self.life.move("watch")
        self.lock = threading.RLock()
        """Held by whatever reaches the actors, or stops or starts them."""
        self.changed = threading.Condition(self.lock)
        """Told when the session is passivated or started."""
        self.actor: pykka.ActorRef[Session] | None = None
        """The session actor, while its actors run."""
        self.pool: McpPoolRef | None = None
        self.rerun: pykka.ActorRef[Rerun] | None = None
        """Runs again the calls a crash cut off, then ends that task."""
        self.acks: set[Ack] = set()
        """Told to the actors, not yet durable (see ``Ack``)."""
        self._actors_for = actors_for
        self._ended = ended
        self._used = time.monotonic()
        self.handle = front(self)
        """Its public front."""
        if followed is None:
            with self.lock:  # an actor that fails to start stops them once they all are
                self.own(past)

    # --- what it is --------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self.life.state

    @property
    def followed(self) -> bool:
        """Whether another process owns it."""
        return self.life.state.followed

    @property
    def takes_over(self) -> bool:
        """Whether it is followed, to be taken over here once its lease is free."""
        return self.life.state is State.FOLLOWED

    @property
    def closed(self) -> bool:
        """Whether it takes no more work here (draining, closing, or ended)."""
        return self.life.state in _CLOSED

    @property
    def running(self) -> bool:
        """Whether its actors run."""
        return self.actor is not None

    @property
    def passive(self) -> bool:
        return self.life.state is State.PASSIVE

    def check_open(self) -> None:
        """Raise why it takes no more work, if it does not."""
        if self.closed:
            raise self.life.why or SessionClosedError(self.session_id)

    def idle_now(self) -> bool:
        """Whether its actors run with nothing running or queued (by what it recorded)."""
        return self.actor is not None and self.journal.idle and not self.life.held

    def idle_for(self) -> float:
        """Seconds since the session was last used or recorded anything."""
        return time.monotonic() - max(self._used, self.journal.last_recorded_at)

    def _went_idle(self) -> None:
        """Nothing runs or waits in it (by what it recorded): its scheduler gives back its run
        slot (once that is durable), and its place may go to a session in line
        (docs/processes.md#capacity). Told by the thread recording it: nothing waits here."""
        actor = self.actor
        if actor is not None and self.runtime.gate.most is not None:  # unbounded: no slots
            with contextlib.suppress(pykka.ActorDeadError):  # stopping: the slot goes back then
                actor.tell(StartNext())
        self.runtime.admission.went_idle()

    def queue_now(self, timeout: float) -> QueueSnapshot | None:
        """What runs and waits; ``None`` if the session broke answering (its drop-out, begun,
        ends it: docs/failures.md#supervision)."""
        assert self.actor is not None
        state = self.actor.ask(GetQueue(), timeout=timeout)
        return state if isinstance(state, QueueSnapshot) else None

    # --- work --------------------------------------------------------------------------------

    def tell(self, plan: TaskPlan, ack: Ack) -> None:
        """Queue ``plan`` (for a conversation the actors know); ``ack`` hears once it is durable.
        Followed: the owner's inbox has it, durable."""
        with self.lock:
            self.check_open()
            self.wake()
            cid = plan.conversation_id
            # The root is always there: only another conversation costs the actor a question.
            if cid != self.root_conversation_id and cid not in {
                c.id for c in self.handle.conversations()
            }:
                raise UnknownConversationError(self.session_id, cid)  # else it waits for ever
            if self.followed:
                self.runtime.owner.send(self.session_id, SubmitTask(plan))
                return ack()
            assert self.actor is not None  # woken, under the lock
            self.acks.add(ack)
            # A task id it holds is not queued again
            # (docs/processes.md#each-command-takes-effect-once).
            self.actor.tell(Enqueue((plan,), ack, once=True))

    def queue(self, plan: TaskPlan) -> str:
        """``tell`` ``plan``, and return its id once it is durable."""
        ack = Ack(self.acks)
        self.tell(plan, ack)
        ack.wait(ACK_WAIT_SEC, f"task {plan.task_id} of session {self.session_id}")
        return plan.task_id

    # --- own, passivate, wake ----------------------------------------------------------------

    def own(self, past: list[Event]) -> None:
        """Start the actors from ``past`` in a place ``Admission`` gives (``own``, then
        ``activate``; ``passivate`` again if they do not start). Hold the lock."""
        self.life.move("own")
        self.runtime.admission.enter(self)
        try:
            since = self.journal.listeners.mark()  # what is recorded after ``past`` reaches them
            self.pool, deps = self._actors_for(self.journal, past)
            self.actor = Session.start(self.journal, deps, self.root_conversation_id, past, since)
            self.life.move_if_can("activate")  # not if it failed at once: its drop-out stops it
        finally:
            if self.actor is None:
                self.life.move_if_can("passivate")
                self.runtime.admission.leave(self)

    def wake(self) -> None:
        """Make sure the actors run (bring a passive session back from its log); hold the lock."""
        self._used = time.monotonic()
        self.life.hold(0)
        if self.passive:
            self.journal.unseal()
            self.own(self.runtime.store.read(self.session_id))
            self.changed.notify_all()

    def start_next(self, plan: TaskPlan | None, calls: OpenCalls, rerun: bool) -> None:
        """Once resumed: run again the calls a crash cut off (``rerun``), or start what waits."""
        with self.lock:  # an actor that failed at once had them stopped: none is started
            if self.actor is None:
                return
            if plan is not None and rerun:
                self.rerun = Rerun.start(self.journal, self.pool, self.actor, plan, calls)
            else:
                self.actor.tell(StartNext())

    def passivate(self, timeout: float = 10.0) -> bool:
        """Stop the actors, and release their threads, if nothing runs or waits in the
        session; return whether it did."""
        with self.lock:
            if self.actor is None or self.closed:
                return False
            state = self.queue_now(timeout)
            if state is None or not state.idle:
                return False
            self.stop_actors(timeout)
            self.life.move("passivate")
            self.changed.notify_all()
            return True

    def take_place(self) -> bool:
        """Hold a place until a command on its way is told (a few seconds at most): a passive
        session's actors start if a place is free at once, never waited for (the owner's thread
        asks: docs/processes.md#capacity). Return whether the actors run."""
        with self.lock:
            if self.passive and not self.runtime.admission.try_enter(self):
                return False
            self.wake()
            self.life.hold(5.0 if self.running else 0)
            return self.running

    def passivate_if_free(self) -> bool:
        """``passivate``, unless another thread is using the session; return whether it did."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            return self.idle_now() and self.passivate()
        finally:
            self.lock.release()

    # --- another process: take over, follow again ---------------------------------------------

    def take_over(self) -> bool:
        """Own the session this process followed (its lease just taken); hold the lock. Return
        whether it did (not when it was closed meanwhile)."""
        if not self.followed:
            return False
        self.runtime.followers.remove(self)
        self.life.move("take_over")
        return True

    def follow_again(self, after_position: int) -> None:
        """Follow the session again: taking it over failed (the store failed meanwhile)."""
        self.life.move("follow")
        self.runtime.followers.add(self, after_position)

    # --- hand back, close --------------------------------------------------------------------

    def drain(self) -> bool:
        """Take no more work (``drain``); return whether it was owned (a followed session is
        only no longer followed: ``hand_back``). A session draining already is owned still:
        a hand-back that a signal cut (``Stopped`` raised in its wait) is taken up again by
        the stop's own (docs/processes.md#stopping), or its lease would be left held."""
        with self.lock:
            if self.life.state is State.DRAINING:
                return True
            if self.closed:
                return False
            if self.followed:
                self.runtime.followers.remove(self)
                self.life.move("hand_back")
                self._ended(self)
                return False
            self.life.move("drain")
            return True

    def stop_taking(self, reason: str, timeout: float) -> QueueSnapshot | None:
        """Start no waiting task, and cut the running one (``Stop``, docs/processes.md#stopping);
        return what ran as the cut found it (``None``: no actor runs)."""
        with self.lock:
            if self.actor is None:
                return None
            self.actor.tell(Stop(reason))
            return self.queue_now(timeout)

    def hand_back(self, timeout: float, *, end_stuck: bool = False) -> bool:
        """Stop the actors and release the lease (``hand_back``); return whether nothing was
        left waiting (what was is in the log, for the next owner). ``end_stuck``: a task an
        actor did not end is ended here, as a stuck close's is.

        Each step runs even if a signal cuts one before it (``Stopped``, raised once in a
        process), and the session leaves ``draining`` only once its lease is released: a
        hand-back cut half-way is finished by the stop's (docs/processes.md#stopping)."""
        with self.lock:
            every_step(
                lambda: self.stop_actors(timeout) if self.actor is not None else None,
                lambda: self._end_stuck(timeout) if end_stuck else None,
                lambda: self.runtime.owner.release(self.session_id, idle=self.journal.idle),
            )
            self.life.move_if_can("hand_back")  # unless it failed meanwhile
        self._ended(self)
        return self.journal.idle

    def _end_stuck(self, timeout: float) -> None:
        """End a task an actor did not end, as a stuck close's is."""
        if ended := forced_close(self.runtime.store.read(self.session_id), timeout, "stop"):
            with contextlib.suppress(LeaseLostError):
                self.journal.record_last(ended)

    def begin_close(self, timeout: float) -> QueueSnapshot | None:
        """``close``, interrupting the running task; ``None`` if it was closed already (or
        followed: then only the following ends)."""
        with self.lock:
            if self.closed:
                return None
            self.life.move("close")
            if self.life.state is State.CLOSED:  # it was followed
                self.runtime.followers.remove(self)
                self._ended(self)
                return None
            if self.actor is None:  # passive: nothing runs
                return QueueSnapshot()
            state = self.queue_now(timeout)
            if state is not None and state.running is not None:
                self.actor.tell(Interrupt("close"))
            return state

    def finish_close(self, timeout: float, reason: str = CLOSED_BY) -> None:
        """Stop the actors, end a task that did not stop in time, record the close (``closed``)
        with ``reason``."""
        self.stop(timeout)
        # A task that did not stop in time is ended here: no actor can record any more.
        ended = forced_close(self.runtime.store.read(self.session_id), timeout)
        try:
            self.journal.record_last([*ended, SessionClosed(reason)])
        except LeaseLostError:  # another process took it meanwhile: its close is not ours
            self.runtime.owner.forget(self.session_id)
            raise
        self.runtime.owner.release(self.session_id)

    def stop(self, timeout: float) -> None:
        """Stop the actors and servers, recording nothing; a close that began ends here."""
        with self.lock:
            if self.actor is not None:
                self.stop_actors(timeout)
            self.life.move_if_can("closed")  # a close that began; not a crash or a failure
        self._ended(self)

    def crash(self, timeout: float) -> None:
        """Stop as a crash does (``lose``): the lease left lapsed (replay's crash points)."""
        with self.lock:
            self.life.move("lose")
            if self.actor is not None:
                self.stop_actors(timeout)
        self._ended(self)
        self.runtime.owner.release(self.session_id, idle=False)

    # --- a session's verbs ---------------------------------------------------------------------

    def interrupt(self) -> None:
        """Abort the running task (``TurnAborted(interrupted)``) and drop the chain it started;
        followed: the owner's inbox has the interrupt, under a key of its own, which the owner
        acts on once however often it is stored."""
        with self.lock:
            if self.followed:
                self.runtime.owner.send(self.session_id, InterruptTask(uuid.uuid4().hex))
            elif self.actor is not None:  # a passive session has nothing to interrupt
                self.actor.tell(Interrupt())

    def destroy(self, conversation_id: str) -> JsonObject:
        """Destroy a conversation; return ``{"ok": true}`` or ``{"ok": false, "reason": ...}``
        (followed: ``{"ok": true, "queued": id}`` once the owner's inbox has it)."""
        with self.lock:
            self.check_open()
            if self.followed:
                queued = self.runtime.owner.send(
                    self.session_id, DestroyConversation(conversation_id)
                )
                return {"ok": True, "queued": queued}
            self.wake()
            assert self.actor is not None  # woken, under the lock
            return cast(JsonObject, self.actor.ask(Destroy(conversation_id), timeout=30))

    def release(
        self, timeout: float = 60.0, *, grace_sec: float | None = None, reason: str = ""
    ) -> bool:
        """Hand the session back for another process to own (``SessionHandle.release``): take
        no more work, let what is queued run for up to ``timeout`` seconds (with ``grace_sec``:
        cut what runs at its next checkpoint, docs/processes.md#stopping), stop the actors,
        release the lease. Return whether nothing was left waiting."""
        if not self.drain():
            return True
        deadline = time.monotonic() + timeout
        with self.journal.feed(False, kinds=FOLLOWED) as feed:
            if grace_sec is not None:
                self._cut_running(feed, grace_sec, timeout, reason or "the process stopped")
                return self.hand_back(timeout, end_stuck=True)
            while not self.journal.idle and (left := deadline - time.monotonic()) > 0:
                feed.get(timeout=min(left, 1.0))
        return self.hand_back(timeout)

    def _cut_running(self, feed: Feed, grace_sec: float, timeout: float, reason: str) -> None:
        """Start nothing more, and ask the running task to end at its next checkpoint
        (``Stop(at_checkpoint=True)``); give it ``grace_sec`` to, then cut what runs (``Stop``);
        return once its end is recorded, or ``timeout`` has passed."""
        with self.lock:
            if self.actor is not None and grace_sec > 0:
                self.actor.tell(Stop(reason, at_checkpoint=True))  # what runs as it is handled ends
            state = self.queue_now(timeout) if self.running else None
        if state is None:
            return  # passive, or broken: nothing runs that an actor could end
        if state.running is not None and grace_sec > 0:
            await_outcome(feed, state.running.task_id, grace_sec, raise_timeout=False)
        state = self.stop_taking(reason, timeout)  # after the Stop: what it cut
        if state is not None and state.running is not None:
            await_outcome(feed, state.running.task_id, timeout, raise_timeout=False)

    def close(self, timeout: float = 10.0, reason: str = CLOSED_BY) -> None:
        """Interrupt the running task, wait up to ``timeout`` seconds, stop the actors, record
        the close (``SessionHandle.close``); closing twice is harmless."""
        self.life.wait_dropped(timeout)  # it failed: what it records is recorded before
        with self.journal.feed(False, kinds=FOLLOWED) as feed:
            state = self.begin_close(timeout)
            if state is not None and state.running is not None:
                await_outcome(feed, state.running.task_id, timeout, raise_timeout=False)
        if state is not None:
            self.finish_close(timeout, reason)

    # --- fail, lose --------------------------------------------------------------------------

    def lose(self, error: PlaitError) -> None:
        """Another process took the session, an actor broke or the store failed a write: stop
        here, raise ``error`` to every waiter (docs/failures.md#supervision).

        The drop-out runs on a thread of its own (the actor that broke may be the caller: it
        cannot wait for itself to stop); it begins before the thread starts, so a ``close``
        that follows a waiter woken by it waits for it."""
        done = self.life.dropping()

        def run() -> None:
            try:
                self._drop_out(error)
            finally:
                done.set()

        # A daemon: a library never keeps the process alive (docs/processes.md#stopping).
        threading.Thread(target=run, name="plait-dropped", daemon=True).start()

    def _drop_out(self, error: PlaitError) -> None:
        """Stop the session in this process (``fail``, or ``lose`` to another process): every
        waiter gets ``error``; a failure records the running task's end."""
        sid = self.session_id
        failed = isinstance(error, SessionFailedError) and not went_away(error)
        if not failed:  # another process took it, or may once the store is back: not ours
            self.runtime.owner.forget(sid)
        self.end("fail" if failed else "lose", error)  # what is asked from now on: refused
        self.journal.fail_feeds(error)  # at once, not after the actors stopped
        with self.lock:
            if self.actor is not None:
                self.stop_actors(STOP_SEC, error)
        if failed and isinstance(error, SessionFailedError):
            self._record_failure(error)
        self._ended(self)

    def _record_failure(self, error: SessionFailedError) -> None:
        """Record the running task's end, unless the store is what failed; give the lease back
        as a crash leaves it (``plait recover`` and ``resume`` take the session up from there)."""
        owner, sid = self.runtime.owner, self.session_id
        refused = self.journal.refusal or error.cause
        if isinstance(refused, StoreError):
            if isinstance(refused, StoreUnavailableError | LeaseLostError):
                owner.forget(sid)  # unreachable, or not ours: the lease lapses on its own
            else:
                # The store answered (another writer went first, a full disk): nothing more is
                # recorded, but the lease is given back as a crash leaves it, so the next owner
                # need not wait for it to lapse (a release that fails leaves it to lapse).
                owner.release(sid, idle=False)
            return
        try:
            ended = failure_end(self.runtime.store.read(sid), error)
            if ended:
                self.journal.record_last(ended)
        except PlaitError as exc:  # the store failed too: the log ends where it does
            log.info("session %s: its end was not recorded: %s", sid, exc)
            owner.forget(sid)
            return
        owner.release(sid, idle=False)

    def end(self, transition: str, error: PlaitError) -> bool:
        """``fail`` or ``lose`` with ``error``, at once (not waiting for whoever holds the
        lock); return whether it moved (not once it had ended)."""
        return self.life.end(transition, error)  # what is asked from now on: refused, why

    def stop_actors(self, timeout: float, error: Exception | None = None) -> None:
        """Stop the actors and servers; the journal records nothing from them after this.
        A submission they did not take fails with ``error`` (else: the session is closed)."""
        actor, self.actor = self.actor, None
        self.runtime.admission.leave(self)
        self.journal.seal()  # an actor stuck past the timeout cannot write after this
        stuck = (pykka.ActorDeadError, pykka.Timeout)  # a stuck actor is left behind, not waited

        rerun, self.rerun = self.rerun, None

        def stop(ref: _Stoppable | None) -> None:
            if ref is not None:
                with contextlib.suppress(*stuck):
                    ref.stop(timeout=timeout)

        def tell_acks() -> None:
            for ack in list(self.acks):  # what the stopped actor did not take: not in the log
                ack(error or SessionClosedError(self.session_id))

        # Every step, even after a signal cut a wait of one (a hand-back goes on: see it).
        every_step(
            lambda: stop(actor),
            self.journal.flush,  # what an actor made ahead is written before the log is read
            lambda: self.runtime.gate.leave(self.session_id),  # its run slot, its end written
            tell_acks,
            lambda: stop(self.pool),  # closes every server: none is left running
            lambda: stop(rerun),
        )


class _Stoppable(Protocol):
    """An actor (or the session's MCP pool) that ``stop_actors`` stops."""

    def stop(self, *, timeout: float | None) -> object: ...


_CLOSED = (State.DRAINING, State.CLOSING, State.CLOSED, State.FAILED, State.LOST)
