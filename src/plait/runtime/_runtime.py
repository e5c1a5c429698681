"""``Runtime``: runs sessions on a store (actors, the effect loop, the model client)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from plait.actors import (
    ApprovalGate,
    ConversationDeps,
    EffectLoop,
    Journal,
    McpPoolRef,
    ModelClient,
    NewId,
    ReadInstructions,
    read_instruction_file,
)
from plait.actors.mcp import FunctionTool, as_tools
from plait.events import (
    MODEL_PROTOCOL,
    ApprovalPolicy,
    Body,
    ConversationOpened,
    Event,
    EventStore,
    NewEvent,
    RecordedSettings,
    SessionStarted,
    Signal,
    StoragePolicy,
    ToolPrefs,
    check_policy,
    recorded_settings,
)
from plait.events.stores import open_store
from plait.runtime._admission import Admission
from plait.runtime._following import Followers
from plait.runtime._gate import TaskGate
from plait.runtime._handle import SessionHandle
from plait.runtime._inputs import check_inputs
from plait.runtime._offload import Offload
from plait.runtime._outside import Outside
from plait.runtime._ownership import Owner, default_owner_id
from plait.runtime._recovery import Recovery
from plait.runtime._sessions import Sessions
from plait.runtime._settings import RuntimeSettings
from plait.runtime._sweeping import Sweeping
from plait.runtime._telemetry import live_export
from plait.runtime._timers import Timer, Timers

if TYPE_CHECKING:
    from plait.actors.mcp import SharedServers

__all__ = ["Outside", "Runtime"]

log = logging.getLogger("plait")

AT_EXIT_SEC = 1.0
"""How long a program that ends without ``close()`` gives its running work to end."""

_open: weakref.WeakSet[Runtime] = weakref.WeakSet()
"""The runtimes not closed yet (a closed or collected one costs the exit nothing)."""


@atexit.register
def _hand_back_at_exit() -> None:
    """Hand back the sessions of every runtime the program did not close, then close it: the
    next process continues them at once (docs/processes.md#a-program-that-ends-without-close).
    Its threads are daemons, so Python reached this without waiting for them."""
    for runtime in list(_open):
        if runtime.store.closed:  # closed under it: its leases lapse, as after a crash
            continue
        try:
            # As a stop on purpose: what runs is cut with the cause ``shutdown``, every
            # session handed back at once (docs/processes.md#stopping).
            runtime.close(AT_EXIT_SEC, grace_sec=AT_EXIT_SEC)
        except Exception as exc:  # what it did not release lapses: ``recover`` takes it up
            log.warning("closing a runtime at exit failed: %s", exc)


os.register_at_fork(after_in_child=_open.clear)  # a child's copies own nothing of the parent's


class Runtime:
    """Runs sessions on a store: actors, the effect loop, and the model client."""

    def __init__(
        self,
        store: EventStore | str | Path = ".plait/plait.db",
        settings: RuntimeSettings | None = None,
        *,
        _outside: Outside | None = None,
    ) -> None:
        """Open ``store`` (an ``EventStore``, a SQLite path or a URL) and start the effect loop,
        configured by ``settings`` (``RuntimeSettings()``: the defaults).

        (``_outside`` is replay's: it answers the model, the MCP servers and the approver
        from the log.)
        """
        self.settings = settings = RuntimeSettings() if settings is None else settings
        """How it runs its sessions."""
        self._owns_store = not isinstance(store, EventStore)
        self.store = store if isinstance(store, EventStore) else open_store(store)
        tools = as_tools(settings.tools)  # before any thread starts: it may refuse them
        self._loop = EffectLoop()
        self._outside = outside = _outside or Outside()
        self._client = outside.model_client or ModelClient(settings.model)
        self._mcp_factory = outside.mcp_factory
        self._shared_servers: SharedServers | None = None  # its MCP servers, which sessions share
        if settings.mcp_servers:  # only then: it loads what most commands never use
            from plait.actors.mcp import SharedServers

            self._shared_servers = SharedServers()
        self._new_id_for: NewId = outside.new_id or (lambda _made_for: settings.new_id())
        workdir = str(settings.workdir)
        self._read_instructions: ReadInstructions = outside.read_instructions or (
            lambda _made_for, name: read_instruction_file(workdir, name)
        )
        self._approval_gate = outside.approval_gate or ApprovalGate(
            settings.approver, settings.approval_timeout_sec
        )
        self.history = settings.history
        """New sessions' history bounds, their ``context_window`` the model's if unset."""
        if self.history.context_window is None:
            window = settings.model.context_window
            self.history = msgspec.structs.replace(self.history, context_window=window)
        self.room = Signal()
        """Moved when a place or a run slot may have come free for work that found none
        (``plait worker`` waits on it beside the inbox; plait's own, not the API)."""
        self.admission = Admission(settings.max_active_sessions, self._place_freed)
        """Places for sessions' actors (plait's own, not the API)."""
        self.gate = TaskGate(settings.max_running_tasks, self.room.notify)
        """Run slots for tasks (plait's own, not the API)."""
        self.off_loop = Offload("plait-calls")
        """Where asyncio callers' submissions run, off their loop (plait's own, not the API)."""
        self.timers = Timers("plait-timers")
        """Its housekeeping jobs: passivating, expiring, taking over (plait's own, not the API)."""
        self._sweeping = Sweeping(self.store, self.timers, settings.expire_every_sec)
        self.sessions = Sessions(
            self,
            tools,
            self._actors_for,
            self._sweeping.start,
            records_servers=outside.records_servers,
        )
        """Its sessions, and which of them this process runs (plait's own, not the API)."""
        self._passivator: Timer | None = None
        if settings.idle_sec is not None:
            # A few looks within ``idle_sec``, so a session idles little longer than that.
            idle_sec = settings.idle_sec
            every = min(idle_sec / 4, 1.0)
            passivate = functools.partial(self.sessions.passivate_idle, idle_sec)
            self._passivator = self.timers.every(every, passivate, "passivate idle sessions")
        if settings.storage_policy.kind == "ttl":
            self._sweeping.start()
        owner_id = settings.owner_id or default_owner_id()
        self.owner = Owner(self.store, self.sessions.hosts, owner_id, settings.lease_sec)
        """This process's leases, and the inbox of the sessions it owns."""
        self.owner.start()
        self.followers = Followers(
            self.store, self.owner.leases, self.sessions.take_over, self.timers
        )
        """The sessions it follows while other processes own them."""
        # A replay makes again what was exported when it ran: it exports nothing.
        self.telemetry = (
            None
            if _outside is not None
            else live_export(self.store, self.owner.id, settings.telemetry)
        )
        """Its spans and metrics on their way to an OTLP backend (``None``: none is sent)."""
        _open.add(self)

    def _place_freed(self) -> None:
        """A place may be free: for a command the owner's thread left waiting, and for
        sessions a worker may take."""
        self.owner.wake()
        self.room.notify()

    def _actors_for(
        self, journal: Journal, past: list[Event]
    ) -> tuple[McpPoolRef | None, ConversationDeps]:
        """A session's ``McpPool`` (if it has tools beside the built-ins), started, and what
        its conversations share."""
        past = past + self.sessions.offer_servers(journal, past)  # a start's, or a wake's
        pool = self._start_pool(journal, past)
        return pool, self._deps(journal, pool, past)

    def _deps(
        self, journal: Journal, pool: McpPoolRef | None, past: list[Event]
    ) -> ConversationDeps:
        """What the session's conversations share; behaviour that changed over time follows
        what the session recorded at its start, so it resumes (and replays) as it ran."""
        recorded = recorded_settings(past)
        return ConversationDeps(
            journal,
            self._loop,
            self._client,
            self.settings.model.model,
            self._new_id_for,
            self._read_instructions,
            self.settings.max_interrupt_chain_depth,
            pool,
            (recorded or RecordedSettings()).history,
            approval_gate=self._approval_gate,
            interrupt_checkpoints=recorded is not None and recorded.interrupt_checkpoints,
            model_protocol=recorded.model_protocol if recorded is not None else 0,
            # The request options are this runtime's, as its model name is (a resume may ask
            # for others); how the prompt is encoded stays as the session started.
            model_options=msgspec.structs.replace(
                self.settings.model.options(),
                send_reasoning=recorded is not None and recorded.model.send_reasoning,
            ),
            # With no bound on tasks running, there is no slot to take or give back.
            task_gate=None if self.gate.most is None else self.gate,
        )

    def _start_pool(self, journal: Journal, past: list[Event]) -> McpPoolRef | None:
        """Start the session's ``McpPool`` (its MCP servers and function tools), if it has
        tools beside the built-ins."""
        functions = self.sessions.tools_for(journal.stream)
        if not self.settings.mcp_servers and not functions:
            return None
        from plait.actors import McpPool

        return McpPool.open(
            journal,
            self._loop,
            self.settings.mcp_servers,
            past,
            self.settings.mcp_limits,
            self._mcp_factory,
            functions,
            self._shared_servers,
        )

    def _recorded(self) -> RecordedSettings:
        """This runtime's configuration, as a session's first event keeps it for replay."""
        settings = self.settings
        limits = settings.mcp_limits
        return RecordedSettings(
            settings.max_interrupt_chain_depth,
            sorted(settings.mcp_servers),
            limits.per_session,
            limits.per_conversation,
            limits.per_conversation_rate,
            limits.rate_window_sec,
            str(Path(settings.workdir).resolve()),
            self.history,
            interrupt_checkpoints=True,
            model_protocol=MODEL_PROTOCOL,
            model=settings.model.options(),
            resume_markers=True,
            servers_per_run=True,
            handoff_answers=True,
            erasable=True,
        )

    def start_session(
        self,
        *,
        base_instructions: str | None = None,
        user_instructions: str | None = None,
        mcp_allowlist: list[str] | None = None,
        storage_policy: StoragePolicy | None = None,
        approval_policy: ApprovalPolicy | None = None,
        tools: Iterable[FunctionTool | Callable[..., object]] = (),
        tool_prefs: ToolPrefs | None = None,
    ) -> SessionHandle:
        """Start a new session with its root conversation; it is stored from its first event.

        ``tools`` are function tools this session offers beside the runtime's (``resume``
        takes them again: they are this process's, not the log's).

        ``storage_policy`` (the runtime's by default) is the root's, and so, inherited, every
        conversation's of the session. ``approval_policy`` (the runtime's by default) is the
        session's for good: resumed, it keeps it; its conversations may only narrow it.
        ``tool_prefs`` are the root's built-in tool switches (``include_plan_tool``...), which
        the conversations it creates inherit.
        """
        policy = self.settings.approval_policy if approval_policy is None else approval_policy
        check_policy(policy)
        check_inputs(base_instructions=base_instructions, user_instructions=user_instructions)
        check_inputs(mcp_allowlist=mcp_allowlist)
        session_id, root = self.settings.new_id(), self.settings.new_id()
        opened = ConversationOpened(
            base_instructions=base_instructions,
            user_instructions=user_instructions,
            mcp_allowlist=mcp_allowlist,
            tool_prefs=tool_prefs or ToolPrefs(),
            storage_policy=storage_policy or self.settings.storage_policy,
        )
        started = SessionStarted(
            root, model=self.settings.model.model, settings=self._recorded(), approval_policy=policy
        )
        first: list[Body | NewEvent] = [started, NewEvent(opened, root)]
        return self.sessions.start(session_id, root, first, tools).handle

    def expire_content(self, now: datetime | None = None) -> int:
        """Delete ``ttl`` conversations' content that is due by ``now`` (the store's clock by
        default); return how many blobs."""
        return self._sweeping.sweep(now)

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
        return self.sessions.resume(session_id, tools=tools)

    def follow(self, session_id: str) -> SessionHandle:
        """A handle on a session that this process never runs: its commands go to the
        inbox, for the session's owner, or for a worker to take it over (a front end that
        leaves running sessions to ``plait worker``); its events come from the log."""
        return self.sessions.follow(session_id)

    def recover(self) -> list[Recovery]:
        """Resume every stored session a process left with a task running or waiting.

        A session that cannot be resumed (its content is not in the log) still has its
        cut-off task ended ``crashed``; its ``Recovery`` says why it was not resumed.
        """
        return self.sessions.recover()

    def tools_for(self, session_id: str) -> list[FunctionTool]:
        """The function tools offered in session ``session_id``: the runtime's and its own."""
        return self.sessions.tools_for(session_id)

    def takes_commands(self, session_id: str) -> bool:
        """Whether this process takes the session's commands as they come, its actors running
        (a worker need not look at the inbox for those: docs/processes.md#capacity)."""
        return self.sessions.takes_commands(session_id)

    @property
    def owned(self) -> list[str]:
        """The sessions this process runs (it holds their leases)."""
        return self.sessions.owned

    def adopt(self, most: int | None = None) -> list[str]:
        """Take over the sessions that need an owner, at most ``most``: those whose owner
        stopped renewing its lease or handed it back with work waiting, and those with inbox
        commands and no live owner (one another process takes first is left to it). Return
        their ids."""
        return self.sessions.adopt(most)

    def fill_places(self) -> list[str]:
        """``plait worker``'s round: adopt as many sessions as there is room for work: run
        slots (``max_running_tasks``) and places (``max_active_sessions``) not held by a
        session with a task running or queued, or commands on their way; with no room, while
        other processes own sessions and none is left waiting for an owner (they keep up),
        hand back the passive sessions whose commands wait here, for one with room
        (docs/processes.md#capacity). Return the ids taken."""
        return self.sessions.fill_places()

    def hand_back_idle(self, idle_sec: float) -> list[str]:
        """Hand back (``release``) the sessions this process runs that have been idle for
        ``idle_sec``, so that any worker may take them when work comes; return their ids."""
        return self.sessions.hand_back_idle(idle_sec)

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
        self.sessions.drain(timeout, grace_sec=grace_sec, reason=reason)

    @property
    def active_sessions(self) -> int:
        """How many sessions have running actors (the rest are passive or closed)."""
        return self.admission.active

    def close(self, timeout: float = 10.0, *, grace_sec: float | None = None) -> None:
        """Close every session, the effect loop and the store (if the runtime opened it).

        With ``grace_sec``, the process stops on purpose: every session is handed back rather
        than closed, as ``drain(grace_sec=)`` does (its running task given ``grace_sec``
        seconds, then cut with the cause ``shutdown``; its lease released at once), so that
        the next process goes on with it (docs/processes.md#stopping)."""
        _open.discard(self)
        if grace_sec is not None:
            self.sessions.drain(timeout, grace_sec=grace_sec)
        self.timers.close(timeout)  # before the store closes under its jobs
        self.sessions.close(timeout)
        self.followers.close()
        self.owner.close()
        self.off_loop.close()  # what is left in it finds its session closed
        with contextlib.suppress(Exception):
            self._loop.submit(self._client.aclose()).result(timeout)
        if self._shared_servers is not None:  # after the sessions, which used them
            with contextlib.suppress(Exception):
                self._loop.submit(self._shared_servers.close()).result(timeout)
        self._loop.close()
        if self.telemetry is not None:  # after the sessions' last events, before the store
            self.telemetry.close(min(timeout, 5.0))
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
