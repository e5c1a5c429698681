"""Which process runs a session: starting one, resuming one, following one another process
owns, taking one over, recovering those a crash left, and handing them back
(docs/processes.md).

``Sessions`` is the part of a ``Runtime`` that decides it, and the table of the sessions this
process runs or follows (``hosts``); every session it runs is its own by a lease (``Owner``),
and every other is followed or left alone. What it uses of the runtime that holds it is what
a session's host uses (``Hosting``), which it hands each host it makes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from plait._errors import ContentUnavailableError, PlaitError, UnknownSessionError
from plait.actors import Journal
from plait.actors.mcp import FunctionTool, as_tools
from plait.events import (
    Body,
    ConversationDestroyed,
    Event,
    NewEvent,
    SessionClosed,
    SessionReopened,
    SessionStarted,
    StoredCommand,
    last_done,
    missing_content,
)
from plait.events.projections import QueueSnapshot, task_queue
from plait.runtime._handle import SessionHandle
from plait.runtime._handoffs import cut_handoffs
from plait.runtime._host import ActorsFor, Hosting, SessionHost
from plait.runtime._life import State
from plait.runtime._recovery import OpenCalls, Recovery, in_flight, open_calls, took_over

__all__ = ["Sessions"]

log = logging.getLogger("plait")

DROP_OUT_WAIT_SEC = 15.0
"""How long resuming waits for the drop-out of a session that failed or was lost here: longer
than the drop-out waits for its actors to stop (``supervision.STOP_SEC``)."""


class Sessions:
    """The sessions of a ``Runtime`` in this process, and which of them are its own to run."""

    def __init__(
        self,
        runtime: Hosting,
        tools: list[FunctionTool],
        actors_for: ActorsFor,
        expiring: Callable[[], object],
        *,
        records_servers: bool = True,
    ) -> None:
        """Keep the sessions of ``runtime``, which offer ``tools``; ``actors_for`` starts a
        session's actors' shared parts; ``expiring()`` is told when a session this process
        runs has content that expires; ``records_servers``: a run records the MCP servers it
        offers where the log last said others (a replay's does not: the log's are fed in)."""
        self.runtime = runtime
        self.hosts: dict[str, SessionHost[SessionHandle]] = {}
        """The sessions this process runs or follows, each's life (plait's own, not the API)."""
        self.tools = tools
        """Function tools every session offers."""
        self._session_tools: dict[str, list[FunctionTool]] = {}
        self._resuming = threading.Lock()  # one host (one writer) per session, whoever calls
        self._actors_for = actors_for
        self._expiring = expiring
        self._records_servers = records_servers

    def start(
        self,
        session_id: str,
        root: str,
        first: Sequence[Body | NewEvent],
        tools: Iterable[FunctionTool | Callable[..., object]] = (),
    ) -> SessionHost[SessionHandle]:
        """Own new session ``session_id``, record its ``first`` events and start its actors
        (``tools`` offered beside the runtime's)."""
        self.offer(session_id, tools)
        epoch = self._take(session_id)
        journal = Journal(self.runtime.store, session_id, epoch=epoch)  # its host writes after
        past = journal.record(first)
        return self._attach(session_id, root, past, epoch)

    def _attach(
        self,
        session_id: str,
        root: str,
        past: list[Event],
        epoch: int | None = None,
        *,
        followed: State | None = None,
    ) -> SessionHost[SessionHandle]:
        """Own a session with lease ``epoch``, its actors started from ``past`` (``followed``:
        follow it, another process owns it)."""
        host: SessionHost[SessionHandle] = SessionHost(
            self.runtime,
            session_id,
            root,
            past,
            self._actors_for,
            SessionHandle,
            self._forget,
            epoch=epoch,
            followed=followed,
        )
        if host.journal.expires and followed is None:
            self._expiring()
        self.hosts[session_id] = host
        return host

    def _forget(self, host: SessionHost[SessionHandle]) -> None:
        """``host``'s session has ended here."""
        if self.hosts.get(host.session_id) is host:
            del self.hosts[host.session_id]

    def resume(
        self, session_id: str, *, tools: Iterable[FunctionTool | Callable[..., object]] = ()
    ) -> SessionHandle:
        """Continue a stored session where it was, or follow it (``Runtime.resume``)."""
        with self._resuming:
            if (here := self._host_here(session_id)) is not None:
                return here.handle
            if self.runtime.store.last_seq(session_id) == 0:  # no lease for a session not there
                raise UnknownSessionError(session_id)
            self.offer(session_id, tools)
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
        if host is not None and host.life.wait_dropped(DROP_OUT_WAIT_SEC):
            host = self.hosts.get(session_id)
        return host

    def _own_if_free(self, session_id: str) -> SessionHost[SessionHandle] | None:
        """Take the session's lease and resume it, unless another live process holds it."""
        epoch = self.runtime.owner.take(session_id)
        return None if epoch is None else self._resume_taken(session_id, epoch)

    def _resume_taken(self, session_id: str, epoch: int) -> SessionHost[SessionHandle]:
        """Resume the session whose lease this process took at ``epoch``; release the lease
        if that fails."""
        try:
            past = self._read_session(session_id)  # all the former owner wrote
            return self._resume(session_id, past, task_queue(past).snapshot(), epoch)
        except BaseException:
            self.runtime.owner.release(session_id)
            raise

    def offer(self, session_id: str, tools: Iterable[FunctionTool | Callable[..., object]]) -> None:
        """Offer ``tools`` in session ``session_id`` beside the runtime's (``ConfigError`` for
        a name taken twice)."""
        own = list(tools)
        if own:
            self._session_tools[session_id] = as_tools([*self.tools, *own])

    def tools_for(self, session_id: str) -> list[FunctionTool]:
        """The function tools offered in session ``session_id``: the runtime's and its own."""
        return self._session_tools.get(session_id, self.tools)

    def offer_servers(self, journal: Journal, past: list[Event]) -> list[Event]:
        """Record the MCP servers this run offers where the log last said others (a replay's
        runtime records none: the log's are fed in, docs/replay.md#mcp-servers-per-run)."""
        from plait.actors import offer_servers

        if not self._records_servers:
            return []
        return offer_servers(journal, self.runtime.settings.mcp_servers, past)

    def _serves(self, session_id: str) -> bool:
        """Whether the session has tools beside the built-ins (an ``McpPool``)."""
        return bool(self.runtime.settings.mcp_servers) or bool(self.tools_for(session_id))

    def follow(self, session_id: str) -> SessionHandle:
        """A handle on a session this process never runs (``Runtime.follow``)."""
        with self._resuming:
            if (here := self._host_here(session_id)) is not None:
                return here.handle
            host = self._follow(session_id, self._read_session(session_id), State.WATCHED)
            return host.handle

    def _follow(
        self, session_id: str, past: list[Event], how: State = State.FOLLOWED
    ) -> SessionHost[SessionHandle]:
        """Follow a session another process owns (``how``: ``FOLLOWED``, to take it over once
        its lease is free, or ``WATCHED``, never)."""
        started = past[0].body
        assert isinstance(started, SessionStarted)  # read_session checks it
        host = self._attach(session_id, started.root_conversation_id, past, followed=how)
        self.runtime.followers.add(host, past[-1].position)
        return host

    def take_over(self, sid: str) -> None:
        """Own session ``sid``, which this process follows, if its lease is free (its owner
        died or handed it back): recover it as ``resume`` does, then run what waits in it."""
        host = self.hosts.get(sid)
        if host is None:
            return  # no longer followed here
        with self._resuming, host.lock:
            if not host.followed or self.hosts.get(sid) is not host:
                return
            epoch = self.runtime.owner.take(sid)
            if epoch is None:
                return
            host.take_over()
            past = self.runtime.store.read(sid)
            host.journal.deliver(past)  # the feeds have all the former owner wrote
            try:
                self._resume(sid, past, task_queue(past).snapshot(), epoch, host)
            except ContentUnavailableError as exc:
                log.error("session %s cannot be taken over: %s", sid, exc)
                self.runtime.owner.release(sid)
                host.end("fail", exc)
                host.journal.fail_feeds(exc)
            except PlaitError:  # the store failed meanwhile: follow it again, try again later
                self.runtime.owner.release(sid)
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
        self.runtime.owner.drop_taken(session_id, past)
        if host is None:  # its host writes after what this records
            journal = self._journal(session_id, past, epoch)
            closed = last_done(past)
            if isinstance(closed.body, SessionClosed):  # resumed by its user: reopened
                past += journal.record([SessionReopened(closed.seq)])
        else:
            journal = host.journal
            journal.reload(past, epoch)
        # Before what a takeover's recovery records, as the run's first deed: a replay then
        # gives the run its servers before the run does anything.
        past += self.offer_servers(journal, past)
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
        self.runtime.owner.wake()  # what its inbox holds
        return host

    def recover(self) -> list[Recovery]:
        """Resume every stored session a process left in flight (``Runtime.recover``)."""
        found: list[Recovery] = []
        for session_id, _, _ in in_flight(self.runtime.store):
            with self._resuming:
                if session_id in self.hosts:
                    continue
                recovery = self._recover(session_id)
            if recovery is not None:
                found.append(recovery)
        return found

    def _recover(self, session_id: str) -> Recovery | None:
        """Take over and resume a session left in flight, unless a live process owns it."""
        epoch = self.runtime.owner.take(session_id)
        if epoch is None:
            return None
        past = self._read_session(session_id)  # as it is now that this process owns it
        state = task_queue(past).snapshot()
        plan, waiting = state.running, len(state.pending)
        if plan is None and not waiting:  # its owner finished it before handing it back
            self.runtime.owner.release(session_id)
            return None
        crashed = plan.task_id if plan is not None else None
        try:
            self._resume(session_id, past, state, epoch)
        except ContentUnavailableError as exc:
            if plan is not None:
                ending = open_calls(past, plan.task_id).ending()
                journal = self._journal(session_id, past, epoch)
                took_over(journal, past, state, ending, cut_handoffs(past))
            self.runtime.owner.release(session_id)
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
        """Take over up to ``most`` of the sessions that need an owner (``Runtime.adopt``);
        return their ids."""
        return self._adopt(self._unowned(self.runtime.store.inbox.commands())[0], most)

    def fill_places(self) -> list[str]:
        """Adopt as many sessions as there is room for work, or make room elsewhere
        (``Runtime.fill_places``); return the ids taken."""
        commands = self.runtime.store.inbox.commands()
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
        places = self.runtime.admission.free(pending)
        hosts = [host for host in list(self.hosts.values()) if not host.followed]
        busy = sum(1 for h in hosts if not h.journal.idle or h.session_id in pending)
        slots = self.runtime.gate.room(busy)
        if places is None or slots is None:
            return slots if places is None else places
        return min(places, slots)

    def _unowned(self, commands: list[StoredCommand]) -> tuple[list[str], bool]:
        """The sessions that need an owner (a lapsed lease, a dead owner's, or commands and no
        live owner), and whether another process holds a live lease."""
        owner = self.runtime.owner
        leases = {lease.stream: lease for lease in owner.leases()}  # dead owners: lapsed
        others = any(x.live and x.owner != owner.id for x in leases.values())
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
                    epochs = self.runtime.owner.take_all(batch)
                except PlaitError as exc:
                    log.warning("sessions %s were not taken over: %s", ", ".join(batch), exc)
                    return taken
                taken += self._resume_all(epochs)
        if left:
            self.runtime.admission.want()  # more wait: ``room`` moves once a place may be free,
            self.runtime.gate.want()  # or a run slot
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
                self.runtime.owner.release(session_id)
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

    def passivate_idle(self, idle_sec: float) -> None:
        """Passivate the sessions idle for ``idle_sec``."""
        for host in list(self.hosts.values()):
            if host.idle_for() >= idle_sec:
                try:
                    host.passivate_if_free()  # one in use is looked at next time
                except Exception:  # a session closing meanwhile: the next look tries again
                    log.debug("passivating session %s failed", host.session_id, exc_info=True)

    def close(self, timeout: float) -> None:
        """Close every session (``SessionHandle.close``), each given up to ``timeout``."""
        for host in list(self.hosts.values()):
            host.close(timeout)

    def drain(
        self, timeout: float = 60.0, *, grace_sec: float | None = None, reason: str = ""
    ) -> None:
        """Hand every session back (``Runtime.drain``)."""
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
        epoch = self.runtime.owner.take(session_id)
        if epoch is None:
            raise PlaitError(f"session {session_id}: another process owns it already")
        return epoch

    def _journal(self, session_id: str, past: list[Event], epoch: int) -> Journal:
        """A journal that writes after ``past`` with lease ``epoch``, signing as the runtime
        does."""
        signer = self.runtime.settings.signer
        return Journal(self.runtime.store, session_id, past, epoch, signer=signer)

    def _read_session(self, session_id: str) -> list[Event]:
        past = self.runtime.store.read(session_id)
        if not past or not isinstance(past[0].body, SessionStarted):
            raise UnknownSessionError(session_id)
        return past
