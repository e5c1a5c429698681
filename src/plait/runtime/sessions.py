"""Which process runs a session: resuming one, following one another process owns, taking
one over, recovering those a crash left, and handing them back (docs/processes.md).

``Sessions`` is the part of ``Runtime`` that decides it; every session this process runs is
its own by a lease (``Owner``), and every other is followed or left alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from plait.actors.journal import Journal
from plait.actors.mcp.functions import FunctionTool, as_tools
from plait.errors import ContentUnavailableError, PlaitError, UnknownSessionError
from plait.events.ownership import StoredCommand
from plait.events.projections.tasks import QueueSnapshot, task_queue
from plait.events.signing import last_done
from plait.events.storage import missing_content
from plait.events.store import EventStore
from plait.events.types import (
    ConversationDestroyed,
    Event,
    SessionClosed,
    SessionReopened,
    SessionStarted,
)
from plait.runtime.following import Followers
from plait.runtime.handle import SessionHandle
from plait.runtime.handoffs import cut_handoffs
from plait.runtime.host import SessionHost
from plait.runtime.ownership import Owner
from plait.runtime.recovery import OpenCalls, Recovery, in_flight, open_calls, took_over

if TYPE_CHECKING:
    from plait.runtime.admission import Admission
    from plait.runtime.gate import TaskGate
    from plait.runtime.settings import RuntimeSettings

__all__ = ["Sessions"]

log = logging.getLogger("plait")

DROP_OUT_WAIT_SEC = 15.0
"""How long resuming waits for the drop-out of a session that failed or was lost here: longer
than the drop-out waits for its actors to stop (``supervision.STOP_SEC``)."""


class Sessions:
    """The sessions of a ``Runtime``, and which of them are this process's to run."""

    store: EventStore
    settings: RuntimeSettings
    owner: Owner
    followers: Followers
    tools: list[FunctionTool]
    _session_tools: dict[str, list[FunctionTool]]
    hosts: dict[str, SessionHost[SessionHandle]]
    _resuming: threading.Lock
    admission: Admission
    gate: TaskGate
    _records_servers: bool

    if TYPE_CHECKING:  # the Runtime's

        def _attach(
            self,
            session_id: str,
            root: str,
            past: list[Event],
            epoch: int | None = None,
            *,
            followed: bool = False,
        ) -> SessionHost[SessionHandle]: ...

    def resume(
        self, session_id: str, *, tools: Iterable[FunctionTool | Callable[..., object]] = ()
    ) -> SessionHandle:
        """Continue a stored session where it was; a task cut off by a crash is aborted.

        ``tools`` are offered beside the runtime's, as ``start_session``'s are (a session's
        own function tools are this process's: a process that resumes it names them again).

        A session another live process owns is followed: the handle's commands go to that
        owner's inbox and its events come from the log, until the owner stops renewing its
        lease (or hands it back): then this process takes it over.
        A closed session is reopened: ``SessionReopened`` in its log says so, and it takes
        work again.
        Raises ``UnknownSessionError`` when the store has no such session, and
        ``ContentUnavailableError`` (and records nothing) when a live conversation's
        content is not in the log: its storage policy did not keep it, or it expired.
        """
        with self._resuming:  # one handle (one writer) per session, whoever calls
            if (here := self._host_here(session_id)) is not None:
                return here.handle
            if self.store.last_seq(session_id) == 0:  # no lease for a session not there
                raise UnknownSessionError(session_id)
            self._offer(session_id, tools)
            host = self._own_if_free(session_id)
            if host is None:
                return self._follow(session_id, self._read_session(session_id)).handle
            return host.handle

    def _host_here(self, session_id: str) -> SessionHost[SessionHandle] | None:
        """The session's host in this process, if it has one. One that failed or was lost
        leaves once its drop-out has stopped its actors: a caller told of the failure (its
        feeds are failed first) and resuming at once waits for that, rather than be handed the
        host that is going (docs/failures.md#supervision)."""
        host = self.hosts.get(session_id)
        if host is not None and host.dropping is not None:
            host.dropping.wait(DROP_OUT_WAIT_SEC)
            host = self.hosts.get(session_id)
        return host

    def _own_if_free(self, session_id: str) -> SessionHost[SessionHandle] | None:
        """Take the session's lease and resume it, unless another live process holds it."""
        epoch = self.owner.take(session_id)
        return None if epoch is None else self._resume_taken(session_id, epoch)

    def _resume_taken(self, session_id: str, epoch: int) -> SessionHost[SessionHandle]:
        """Resume the session whose lease this process took at ``epoch``; release the lease
        if that fails."""
        try:
            past = self._read_session(session_id)  # all the former owner wrote
            return self._resume(session_id, past, task_queue(past).snapshot(), epoch)
        except BaseException:
            self.owner.release(session_id)
            raise

    def _offer(
        self, session_id: str, tools: Iterable[FunctionTool | Callable[..., object]]
    ) -> None:
        """Offer ``tools`` in session ``session_id`` beside the runtime's (``ConfigError`` for
        a name taken twice)."""
        own = list(tools)
        if own:
            self._session_tools[session_id] = as_tools([*self.tools, *own])

    def tools_for(self, session_id: str) -> list[FunctionTool]:
        """The function tools offered in session ``session_id``: the runtime's and its own."""
        return self._session_tools.get(session_id, self.tools)

    def _offer_servers(self, journal: Journal, past: list[Event]) -> list[Event]:
        """Record the MCP servers this run offers where the log last said others (a replay's
        runtime records none: the log's are fed in, docs/replay.md#mcp-servers-per-run)."""
        from plait.actors.pool import offer_servers

        if not self._records_servers:
            return []
        return offer_servers(journal, self.settings.mcp_servers, past)

    def _serves(self, session_id: str) -> bool:
        """Whether the session has tools beside the built-ins (an ``McpPool``)."""
        return bool(self.settings.mcp_servers) or bool(self.tools_for(session_id))

    def follow(self, session_id: str) -> SessionHandle:
        """A handle on a session that this process never runs: its commands go to the
        inbox, for the session's owner, or for a worker to take it over (a front end that
        leaves running sessions to ``plait worker``); its events come from the log."""
        with self._resuming:
            if (here := self._host_here(session_id)) is not None:
                return here.handle
            host = self._follow(session_id, self._read_session(session_id))
            host.takes_over = False
            return host.handle

    def _follow(self, session_id: str, past: list[Event]) -> SessionHost[SessionHandle]:
        """Follow a session another process owns."""
        started = past[0].body
        assert isinstance(started, SessionStarted)  # read_session checks it
        host = self._attach(session_id, started.root_conversation_id, past, followed=True)
        self.followers.add(host, past[-1].position)
        return host

    def _take_over(self, sid: str) -> None:
        """Own session ``sid``, which this process follows, if its lease is free (its owner
        died or handed it back): recover it as ``resume`` does, then run what waits in it."""
        host = self.hosts.get(sid)
        if host is None:
            return  # no longer followed here
        with self._resuming, host.lock:
            if not host.followed or self.hosts.get(sid) is not host:
                return
            epoch = self.owner.take(sid)
            if epoch is None:
                return
            host.take_over()
            past = self.store.read(sid)
            host.journal.deliver(past)  # the feeds have all the former owner wrote
            try:
                self._resume(sid, past, task_queue(past).snapshot(), epoch, host)
            except ContentUnavailableError as exc:
                log.error("session %s cannot be taken over: %s", sid, exc)
                self.owner.release(sid)
                host.end("fail", exc)
                host.journal.fail_feeds(exc)
            except PlaitError:  # the store failed meanwhile: follow it again, try again later
                self.owner.release(sid)
                host.follow_again(past[-1].position)
                raise

    def _resume(
        self,
        session_id: str,
        past: list[Event],
        state: QueueSnapshot,
        epoch: int,
        host: SessionHost[SessionHandle] | None = None,
    ) -> SessionHost[SessionHandle]:
        """Resume from ``past``, whose tasks ``state`` folds, writing with lease ``epoch``
        (in ``host``, a session this process followed); if a task was running or waiting,
        ``SessionResumed`` marks where this process took over."""
        plan = state.running
        destroyed = {e.conversation_id for e in past if isinstance(e.body, ConversationDestroyed)}
        missing = missing_content(past, lambda cid: cid is not None and cid not in destroyed)
        if missing:
            raise ContentUnavailableError(session_id, "resume", missing)
        self.owner.drop_taken(session_id, past)
        if host is None:  # its host writes after what this records
            journal = Journal(self.store, session_id, past, epoch, signer=self.settings.signer)
            closed = last_done(past)
            if isinstance(closed.body, SessionClosed):  # resumed by its user: reopened
                past += journal.record([SessionReopened(closed.seq)])
        else:
            journal = host.journal
            journal.reload(past, epoch)
        # Before what a takeover's recovery records, as the run's first deed: a replay then
        # gives the run its servers before the run does anything.
        past += self._offer_servers(journal, past)
        started = past[0].body
        assert isinstance(started, SessionStarted)  # read_session and in_flight check it
        root = started.root_conversation_id
        calls = open_calls(past, plan.task_id) if plan is not None else OpenCalls()
        rerun = plan is not None and bool(calls.rerun and self._serves(session_id))
        cut = cut_handoffs(past)  # a fork may cut a hand-off from its answer
        if plan is not None and rerun:  # safe calls run again, recorded started at once
            past += took_over(journal, past, state, [*calls.rerun, *calls.denials], cut)
        elif plan is not None or state.pending or cut:
            ending = calls.ending() if plan is not None else []
            past += took_over(journal, past, state, ending, cut)
        if host is None:
            host = self._attach(session_id, root, past, epoch)
        else:
            host.own(past)
        host.start_next(plan, calls, rerun)
        self.owner.wake()  # what its inbox holds
        return host

    def recover(self) -> list[Recovery]:
        """Resume every stored session a process left with a task running or waiting.

        A session that cannot be resumed (its content is not in the log) still has its
        cut-off task ended ``crashed``; its ``Recovery`` says why it was not resumed.
        """
        found: list[Recovery] = []
        for session_id, _, _ in in_flight(self.store):
            with self._resuming:
                if session_id in self.hosts:
                    continue
                recovery = self._recover(session_id)
            if recovery is not None:
                found.append(recovery)
        return found

    def _recover(self, session_id: str) -> Recovery | None:
        """Take over and resume a session left in flight, unless a live process owns it."""
        epoch = self.owner.take(session_id)
        if epoch is None:
            return None
        past = self._read_session(session_id)  # as it is now that this process owns it
        state = task_queue(past).snapshot()
        plan, waiting = state.running, len(state.pending)
        if plan is None and not waiting:  # its owner finished it before handing it back
            self.owner.release(session_id)
            return None
        crashed = plan.task_id if plan is not None else None
        try:
            self._resume(session_id, past, state, epoch)
        except ContentUnavailableError as exc:
            if plan is not None:
                ending = open_calls(past, plan.task_id).ending()
                journal = Journal(self.store, session_id, past, epoch, signer=self.settings.signer)
                took_over(journal, past, state, ending, cut_handoffs(past))
            self.owner.release(session_id)
            return Recovery(session_id, crashed, waiting, exc.reason)
        return Recovery(session_id, crashed, waiting)

    def takes_commands(self, session_id: str) -> bool:
        """Whether this process takes the session's commands as they come, its actors running
        (a worker need not look at the inbox for those: docs/processes.md#capacity)."""
        host = self.hosts.get(session_id)
        return host is not None and host.running and not host.followed

    @property
    def owned(self) -> list[str]:
        """The sessions this process runs (it holds their leases)."""
        return [s for s, host in list(self.hosts.items()) if not host.followed]

    def adopt(self, most: int | None = None) -> list[str]:
        """Take over the sessions that need an owner, at most ``most``: those whose owner
        stopped renewing its lease or handed it back with work waiting, and those with inbox
        commands and no live owner (one another process takes first is left to it). Return
        their ids."""
        return self._adopt(self._unowned(self.store.commands())[0], most)

    def fill_places(self) -> list[str]:
        """``plait worker``'s round: adopt as many sessions as there is room for work: run
        slots (``max_running_tasks``) and places (``max_active_sessions``) not held by a
        session with a task running or queued, or commands on their way; with no room, while
        other processes own sessions and none is left waiting for an owner (they keep up),
        hand back the passive sessions whose commands wait here, for one with room
        (docs/processes.md#capacity). Return the ids taken."""
        commands = self.store.commands()
        pending = {stored.stream for stored in commands}
        wanted, others = self._unowned(commands)
        if others and not wanted and self._room(pending) == 0:
            for session_id in pending:
                host = self.hosts.get(session_id)
                if host is not None:
                    with host.lock:  # the owner's thread starts it under it: not meanwhile
                        if host.passive and self._room(pending) == 0:
                            host.release(1.0)
        return self._adopt(wanted, self._room(pending))

    def _room(self, pending: set[str]) -> int | None:
        """How many more sessions may start work here now (``None``: no bound): the fewer of
        the free places and the run slots not claimed by a session with work, or with
        commands on their way (``pending``)."""
        places = self.admission.free(pending)
        hosts = [host for host in list(self.hosts.values()) if not host.followed]
        busy = sum(1 for h in hosts if not h.journal.idle or h.session_id in pending)
        slots = self.gate.room(busy)
        if places is None or slots is None:
            return slots if places is None else places
        return min(places, slots)

    def _unowned(self, commands: list[StoredCommand]) -> tuple[list[str], bool]:
        """The sessions that need an owner (a lapsed lease, a dead owner's, or commands and no
        live owner), and whether another process holds a live lease."""
        leases = {lease.stream: lease for lease in self.owner.leases()}  # dead owners: lapsed
        others = any(x.live and x.owner != self.owner.id for x in leases.values())
        wanted = [s for s, lease in leases.items() if lease.owner is not None and not lease.live]
        for stored in commands:
            lease = leases.get(stored.stream)
            if (lease is None or not lease.live) and stored.stream not in wanted:
                wanted.append(stored.stream)
        return [session_id for session_id in wanted if session_id not in self.hosts], others

    def _adopt(self, wanted: list[str], most: int | None) -> list[str]:
        """Take over up to ``most`` of the sessions ``wanted``, in order: their leases in one
        transaction (again for as many more, where another process held some), then each
        resumed (docs/processes.md#capacity). Return the ids taken."""
        taken: list[str] = []
        with self._resuming:
            left = [session_id for session_id in wanted if session_id not in self.hosts]
            while left and (most is None or len(taken) < most):
                batch = left if most is None else left[: most - len(taken)]
                left = left[len(batch) :]
                try:
                    epochs = self.owner.take_all(batch)
                except PlaitError as exc:
                    log.warning("sessions %s were not taken over: %s", ", ".join(batch), exc)
                    return taken
                taken += self._resume_all(epochs)
        if left:
            self.admission.want()  # more wait: ``room`` moves once a place may be free,
            self.gate.want()  # or a run slot
        return taken

    def _resume_all(self, epochs: dict[str, int]) -> list[str]:
        """Resume each session whose lease this process took (at its epoch, by id); return
        those resumed. If cut short (a bug, a signal), no lease is left held and unused."""
        resumed: list[str] = []
        try:
            for session_id, epoch in list(epochs.items()):
                try:
                    self._resume_taken(session_id, epoch)
                    resumed.append(session_id)
                except PlaitError as exc:
                    log.warning("session %s was not taken over: %s", session_id, exc)
                del epochs[session_id]
        finally:
            for session_id in epochs:
                self.owner.release(session_id)
        return resumed

    def hand_back_idle(self, idle_sec: float) -> list[str]:
        """Hand back (``release``) the sessions this process runs that have been idle for
        ``idle_sec``, so that any worker may take them when work comes; return their ids."""
        idle = [
            host
            for host in list(self.hosts.values())
            if not host.followed and host.idle_for() >= idle_sec and host.journal.idle
        ]
        return [host.session_id for host in idle if host.release(5.0)]

    def drain(
        self, timeout: float = 60.0, *, grace_sec: float | None = None, reason: str = ""
    ) -> None:
        """Hand every session back (``SessionHandle.release``), what runs given up to
        ``timeout`` seconds to end: a process that stops for good, and lets others go on.
        With ``grace_sec``, no waiting task starts: each running task is given ``grace_sec``
        seconds, then cut (``TurnAborted(cause="shutdown")``, ``reason`` its detail), all
        sessions at once, and every lease is released at once (docs/processes.md#stopping):
        the whole drain takes ``grace_sec`` + ``timeout`` at most, however many sessions (one
        not handed back by then is left to lapse, as after a crash)."""
        hosts = list(self.hosts.values())
        if grace_sec is None:
            for host in hosts:
                host.release(timeout)
            return

        def stop(host: SessionHost[SessionHandle]) -> None:
            try:
                host.release(timeout, grace_sec=grace_sec, reason=reason)
            except PlaitError as exc:  # its lease lapses on its own; the others go on
                log.warning("session %s was not handed back: %s", host.session_id, exc)

        stopping = [
            threading.Thread(target=stop, args=(host,), name="plait-stop", daemon=True)
            for host in hosts
        ]
        deadline = time.monotonic() + grace_sec + timeout
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(max(0.0, deadline - time.monotonic()))
        late = sum(thread.is_alive() for thread in stopping)
        if late:
            log.warning("%d sessions were not handed back within %g s", late, grace_sec + timeout)

    def _take(self, session_id: str) -> int:
        """Own a new session (nobody can hold its lease yet)."""
        epoch = self.owner.take(session_id)
        if epoch is None:
            raise PlaitError(f"session {session_id}: another process owns it already")
        return epoch

    def _read_session(self, session_id: str) -> list[Event]:
        past = self.store.read(session_id)
        if not past or not isinstance(past[0].body, SessionStarted):
            raise UnknownSessionError(session_id)
        return past
