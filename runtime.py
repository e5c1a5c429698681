"""The embedding API: a ``Runtime`` on a store, and ``SessionHandle``s to drive sessions.

    runtime = Runtime(".plait/plait.db", model=ModelSettings(base_url=..., model=...))
    session = runtime.start_session(base_instructions="Be brief.")
    outcome = session.run("What changed in the last release?")
    print(outcome.status, outcome.last_assistant_message)
    runtime.close()

``run`` waits for the task and every continuation an interrupting tool (``conv_create``,
``conv_send``) chains after it, and returns how the chain ended. ``subscribe`` gives the
session's events as they are recorded, with the transient text deltas between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal, cast

import msgspec
import pykka

from plait.actors.approvals import DEFAULT_APPROVAL_TIMEOUT_SEC, ApprovalGate, Approver
from plait.actors.conversation import ConversationDeps
from plait.actors.effects import EffectLoop
from plait.actors.journal import Feed, Journal
from plait.actors.mcp.config import McpServerConfig
from plait.actors.messages import Destroy, Enqueue, Interrupt
from plait.actors.model import ModelClient, ModelSettings
from plait.actors.pool import McpLimits
from plait.actors.scheduler import SchedulerState, evolve
from plait.actors.session import Session
from plait.errors import ConfigError, ContentUnavailableError, ModelErrorKind, PlaitError
from plait.events.projections.history import ConversationInfo, Histories, conversation_index
from plait.events.projections.stats import ConversationStats, StatsProjection
from plait.events.storage import Expiry, missing_content
from plait.events.store import EventStore
from plait.events.stores import open_store
from plait.events.types import (
    Body,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    NewEvent,
    SessionClosed,
    SessionResumed,
    SessionStarted,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    Transient,
    TurnAborted,
)
from plait.events.values import (
    APPROVAL_POLICIES,
    MODEL_PROTOCOL,
    ApprovalPolicy,
    ContextChange,
    HistorySettings,
    InputItem,
    InputText,
    RuntimeSettings,
    StoragePolicy,
    TaskPlan,
    ToolPrefs,
)
from plait.replay.recovery import FORCED, OpenCalls, Rerun, open_calls

__all__ = ["KEEP", "KeepType", "Recovery", "Runtime", "SessionHandle", "TaskOutcome", "in_flight"]

log = logging.getLogger("plait")

Status = Literal[
    "completed",
    "truncated",
    "filtered",
    "model_error",
    "interrupted",
    "failed",
    "crashed",
    "dropped",
]


class KeepType(enum.Enum):
    """The type of ``KEEP``."""

    KEEP = "keep"


KEEP: Final = KeepType.KEEP
"""For ``change_context``: leave this part of the context as it is."""


class TaskOutcome(msgspec.Struct, frozen=True):
    """How a submitted task (and the continuations it chained) ended."""

    task_id: str
    """The task that was submitted."""
    conversation_id: str
    """Where it ran."""
    status: Status
    """``completed``, or why not: ``truncated`` (the server cut the final reply at the output
    cap or the context's end) or ``filtered`` (its content filter stopped it), with the text
    it had; ``model_error`` (the model server failed: ``error_kind`` says how);
    ``interrupted``, ``failed`` (something else failed), ``crashed``, ``dropped``."""
    last_assistant_message: str | None = None
    """The final answer (what there was of it, when truncated or filtered)."""
    detail: str = ""
    """What happened, when it did not complete."""
    error_kind: ModelErrorKind | None = None
    """For ``model_error``: ``auth``, ``rate_limited``, ``unavailable``, ``bad_request``,
    ``timeout``, ``malformed`` or ``disconnected``."""

    @property
    def ok(self) -> bool:
        """Whether the task completed."""
        return self.status == "completed"


class SessionHandle:
    """Drives one session of a ``Runtime``; all methods are safe from any thread."""

    def __init__(self, runtime: Runtime, journal: Journal, root_id: str, past: list[Event]):
        self.runtime = runtime
        self.session_id = journal.stream
        """The session id (its stream in the store)."""
        self.root_conversation_id = root_id
        """The root conversation, which cannot be destroyed."""
        self._journal = journal
        self._pool: Any = None
        self._rerun: Any = None  # runs again the calls a crash cut off, then ends that task
        if runtime.mcp_servers:
            from plait.actors.pool import McpPool

            self._pool = McpPool.start(
                journal,
                runtime.effects,
                runtime.mcp_servers,
                past,
                runtime.mcp_limits,
                runtime.mcp_factory,
            )
        deps = runtime._deps(journal, self._pool, past)
        self._actor = Session.start(journal, deps, root_id, past)
        self._scheduler: Any = self._actor.ask("scheduler")
        self._closed = False

    def submit(
        self, prompt: str | Sequence[InputItem], *, conversation_id: str | None = None
    ) -> str:
        """Queue a task in a conversation (the root by default); return its task id."""
        self._check_open()
        items: list[InputItem] = [InputText(prompt)] if isinstance(prompt, str) else list(prompt)
        cid = conversation_id or self.root_conversation_id
        plan = TaskPlan(self.runtime.new_id(), cid, items)
        self._scheduler.tell(Enqueue((plan,)))
        return plan.task_id

    def run(
        self,
        prompt: str | Sequence[InputItem],
        *,
        conversation_id: str | None = None,
        timeout: float | None = None,
        on_item: Callable[[Event | Transient], object] | None = None,
    ) -> TaskOutcome:
        """Submit a task and wait until it and its continuations end; return how.

        ``on_item`` sees every event and text delta of the session while it waits.
        """
        with self.subscribe(transient=on_item is not None) as feed:
            task_id = self.submit(prompt, conversation_id=conversation_id)
            return _await_outcome(feed, task_id, timeout, on_item=on_item)

    async def arun(
        self,
        prompt: str | Sequence[InputItem],
        *,
        conversation_id: str | None = None,
        timeout: float | None = None,
    ) -> TaskOutcome:
        """``run`` for asyncio code: waits without blocking the event loop."""
        return await asyncio.to_thread(
            self.run, prompt, conversation_id=conversation_id, timeout=timeout
        )

    def change_context(
        self,
        conversation_id: str | None = None,
        *,
        base_instructions: str | KeepType | None = KEEP,
        user_instructions: str | KeepType | None = KEEP,
        mcp_allowlist: list[str] | KeepType | None = KEEP,
        tool_prefs: ToolPrefs | KeepType | None = KEEP,
        clear_history: bool = False,
        approval_policy: ApprovalPolicy | KeepType | None = KEEP,
    ) -> str:
        """Change a conversation's context (the root's by default); return the task id.

        The change is queued like a task, so it applies from the next task's first turn; what
        is not given stays (``KEEP``). New ``user_instructions`` join the history; with
        ``clear_history`` the history starts afresh. Recorded as ``ConversationContextChanged``.
        An ``approval_policy`` may only narrow the session's (``None``: the session's again);
        a wider one is narrowed to it, and ``ApprovalPolicyNarrowed`` says so.
        """
        if approval_policy is not KEEP and approval_policy is not None:
            _check_policy(approval_policy)
        given: dict[str, Any] = {
            "base_instructions": base_instructions,
            "user_instructions": user_instructions,
            "mcp_allowlist": mcp_allowlist,
            "tool_prefs": tool_prefs,
            "approval_policy": approval_policy,
        }
        changes = {name: value for name, value in given.items() if value is not KEEP}
        change = ContextChange(sorted(changes), clear_history=clear_history, **changes)
        self._check_open()
        cid = conversation_id or self.root_conversation_id
        plan = TaskPlan(self.runtime.new_id(), cid, context=change)
        self._scheduler.tell(Enqueue((plan,)))
        return plan.task_id

    def compact(
        self,
        conversation_id: str | None = None,
        *,
        keep_recent_tokens: int | None = None,
        timeout: float | None = None,
    ) -> TaskOutcome:
        """Summarise a conversation's older history (the root's by default) and wait for it.

        Queued like a task. The summary replaces the older messages; about
        ``keep_recent_tokens`` (by default the runtime's ``HistorySettings``) of the latest stay
        as they are, and always the last input. Recorded as ``HistoryCompacted``. A history
        too short to compact is left alone.
        """
        self._check_open()
        cid = conversation_id or self.root_conversation_id
        if keep_recent_tokens is None:
            keep_recent_tokens = self.runtime.history.keep_recent_tokens
        plan = TaskPlan(self.runtime.new_id(), cid, compact=keep_recent_tokens)
        with self.subscribe(transient=False) as feed:
            self._scheduler.tell(Enqueue((plan,)))
            return _await_outcome(feed, plan.task_id, timeout)

    def interrupt(self) -> None:
        """Abort the running task (``TurnAborted(interrupted)``) and drop the chain it started."""
        self._scheduler.tell(Interrupt())

    def destroy(self, conversation_id: str) -> dict[str, Any]:
        """Destroy a conversation; returns ``{"ok": true}`` or ``{"ok": false, "reason": ...}``."""
        return cast(dict[str, Any], self._actor.ask(Destroy(conversation_id), timeout=30))

    def subscribe(self, *, transient: bool = True) -> Feed:
        """Return a live feed of the session's events from now on.

        Its transient text deltas come too, unless ``transient`` is false: a waiter that reads
        only events is then not woken for every streamed fragment.
        """
        return self._journal.feed(transient)

    async def events(self) -> AsyncIterator[Event | Transient]:
        """Iterate over the live feed from asyncio code."""
        feed = self.subscribe()
        try:
            while (item := await asyncio.to_thread(feed.get, 0.5)) is not None or not self._closed:
                if item is not None:
                    yield item
        finally:
            feed.close()

    def conversations(self) -> list[ConversationInfo]:
        """The live conversations (``conv.list``)."""
        return conversation_index(self._histories())

    def history(self, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """A conversation's history as OpenAI chat messages (the root by default)."""
        conv = self._histories().conversations.get(conversation_id or self.root_conversation_id)
        if conv is None:
            raise PlaitError(f"session {self.session_id}: no conversation {conversation_id}")
        return [m.to_openai() for m in conv.messages]

    def stats(self) -> dict[str, ConversationStats]:
        """Per-conversation metrics, by conversation id: tokens, tool calls, MCP latency,
        cancellations, failures (folded from the log: ``plait stats`` shows the same)."""
        events = self.runtime.store.read(self.session_id, resolve_blobs=False)
        return StatsProjection().fold(events).conversations

    def _histories(self) -> Histories:
        return cast(Histories, self._actor.ask("histories", timeout=30))

    def _check_open(self) -> None:
        if self._closed:
            raise PlaitError(f"session {self.session_id} is closed")

    def close(self, timeout: float = 10.0) -> None:
        """Cancel a running task, wait up to ``timeout`` seconds, stop the actors, record the close.

        A task that has not stopped by then is force-aborted (``TurnAborted(interrupted)``,
        its open calls answered) and recorded so. Closing twice is harmless.
        """
        if self._closed:
            return
        self._closed = True
        with self.subscribe(transient=False) as feed:
            state: SchedulerState = self._scheduler.ask("state", timeout=timeout)
            if state.running is not None:
                self._scheduler.tell(Interrupt("close"))
                _await_outcome(feed, state.running.task_id, timeout, raise_timeout=False)
        self._stop(timeout)
        # A task that did not stop in time is ended here: no actor can record any more.
        past = self.runtime.store.read(self.session_id)
        plan = _scheduled(past).running
        ended: list[NewEvent] = []
        if plan is not None:
            why = FORCED.format(timeout=timeout)
            forced = TurnAborted("interrupted", "forced_close", why)
            bodies = open_calls(past, plan.task_id, "forced_close").ending(forced)
            ended = [NewEvent(b, plan.conversation_id, plan.task_id) for b in bodies]
        self._journal.record_last([*ended, SessionClosed("closed by the embedder")])

    def _stop(self, timeout: float) -> None:
        """Stop the session's actors and servers, recording nothing (as a crash would)."""
        self._closed = True
        self._journal.seal()  # an actor stuck past the timeout cannot write after this
        stuck = (pykka.ActorDeadError, pykka.Timeout)  # a stuck actor is left behind, not waited
        with contextlib.suppress(*stuck):
            self._actor.stop(timeout=timeout)
        with contextlib.suppress(*stuck):
            self._scheduler.stop(timeout=timeout)
        if self._pool is not None:
            with contextlib.suppress(*stuck):
                self._pool.stop(timeout=timeout)  # closes every server: nothing is left running
        if self._rerun is not None:
            with contextlib.suppress(*stuck):
                self._rerun.stop(timeout=timeout)
        self.runtime._sessions.pop(self.session_id, None)


def _await_outcome(
    feed: Feed,
    task_id: str,
    timeout: float | None,
    raise_timeout: bool = True,
    on_item: Callable[[Event | Transient], object] | None = None,
) -> TaskOutcome:
    """Follow ``task_id`` through the continuations it chains until the chain ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    watched = {task_id}
    awaited: set[str] = set()
    conversation = ""
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        item = feed.get(timeout=remaining if remaining is None else max(remaining, 0))
        if item is None:
            if raise_timeout:
                raise PlaitError(f"task {task_id} did not end within {timeout} s (it goes on)")
            return TaskOutcome(task_id, conversation, "interrupted", detail="timed out")
        if on_item is not None:
            on_item(item)
        if not isinstance(item, Event) or item.task_id is None:
            continue
        body = item.body
        if isinstance(body, TaskEnqueued) and body.plan.closure is not None:
            if body.plan.closure.call_id in awaited:
                watched.add(body.plan.task_id)
            continue
        if item.task_id not in watched:
            continue
        conversation = item.conversation_id or conversation
        if isinstance(body, TaskCompleted | TurnAborted):
            if isinstance(body, TurnAborted) and body.reason == "replaced":
                awaited.update(body.awaiting_call_ids)
                continue
            return outcome(task_id, conversation, body)
        if isinstance(body, TaskDropped):
            return TaskOutcome(task_id, conversation, "dropped", detail=body.reason)


CUT_OFF: dict[str, tuple[Status, str]] = {
    "length": ("truncated", "the reply was cut off at the output cap or the context's end"),
    "content_filter": ("filtered", "the model server's content filter stopped the reply"),
}


def outcome(task_id: str, conversation: str, end: TaskCompleted | TurnAborted) -> TaskOutcome:
    """How a task ended, from the event that ended it."""
    if isinstance(end, TurnAborted):
        if end.model_error is not None:
            return TaskOutcome(
                task_id, conversation, "model_error", None, end.detail, end.model_error
            )
        return TaskOutcome(task_id, conversation, end.reason, detail=end.detail)  # type: ignore[arg-type]
    text = end.last_assistant_message if isinstance(end.last_assistant_message, str) else None
    if end.cut_off is None:
        return TaskOutcome(task_id, conversation, "completed", text)
    status, why = CUT_OFF[end.cut_off]
    return TaskOutcome(task_id, conversation, status, text, f"{why} (finish_reason {end.cut_off})")


class Recovery(msgspec.Struct, frozen=True):
    """A session ``Runtime.recover`` found in flight."""

    session_id: str
    """The session."""
    crashed_task: str | None
    """The task the process stopped in, now ended ``crashed``; ``None`` if none ran."""
    waiting: int
    """Tasks that were waiting to run; they run now, in order, if the session resumed."""
    not_resumed: str = ""
    """Why the session was not resumed (empty when it was)."""


def in_flight(store: EventStore) -> Iterator[tuple[str, list[Event], SchedulerState]]:
    """The sessions of ``store`` left open with a task running or waiting, with their events
    and their scheduler's state: what ``Runtime.recover`` resumes."""
    for info in store.streams():
        past = store.read(info.stream)
        if not past or not isinstance(past[0].body, SessionStarted):
            continue  # not a session
        state = _scheduled(past)
        idle = state.running is None and not state.pending
        if not idle and not isinstance(past[-1].body, SessionClosed):
            yield info.stream, past, state


def _scheduled(past: Sequence[Event]) -> SchedulerState:
    state = SchedulerState()
    for event in past:
        evolve(state, event)
    return state


def _check_policy(policy: object) -> None:
    if policy not in APPROVAL_POLICIES:
        known = ", ".join(APPROVAL_POLICIES)
        raise ConfigError(f"approval policy {policy!r}: expected one of {known}")


def _took_over(
    journal: Journal, past: Sequence[Event], state: SchedulerState, bodies: Sequence[Body]
) -> list[Event]:
    """Record ``SessionResumed`` (if the session records it), then ``bodies`` in the running
    task (the recovery of the task a crash cut off), as one group."""
    plan = state.running
    started = past[0].body
    settings = started.settings if isinstance(started, SessionStarted) else None
    ids = (plan.conversation_id, plan.task_id) if plan else (None, None)
    items = [NewEvent(b, *ids) for b in bodies]
    if settings is not None and settings.resume_markers:
        marker = SessionResumed(plan.task_id if plan else None, len(state.pending))
        items.insert(0, NewEvent(marker))
    return journal.record(items) if items else []


class Runtime:
    """Runs sessions on a store: actors, the effect loop, and the model client."""

    def __init__(
        self,
        store: EventStore | str | Path = ".plait/plait.db",
        *,
        model: ModelSettings | None = None,
        workdir: str | Path = ".",
        max_interrupt_chain_depth: int = 8,
        new_id: Callable[[], str] | None = None,
        mcp_servers: Mapping[str, McpServerConfig] | None = None,
        mcp_limits: McpLimits | None = None,
        storage_policy: StoragePolicy | None = None,
        history: HistorySettings | None = None,
        expire_every_sec: float | None = 60.0,
        model_client: Any = None,
        mcp_factory: Callable[..., Any] | None = None,
        approval_policy: ApprovalPolicy = "never",
        approver: Approver | None = None,
        approval_timeout_sec: float = DEFAULT_APPROVAL_TIMEOUT_SEC,
        approval_gate: Any = None,
    ) -> None:
        """Open ``store`` (an ``EventStore``, a SQLite path or a URL) and start the effect loop.

        ``storage_policy`` is new sessions' default (``full``). Once the runtime has a
        session with a ``ttl`` conversation (or ``ttl`` is the default), it deletes every
        ``expire_every_sec`` the content of the store's ``ttl`` conversations that is due
        (``None``: only when ``expire_content`` is called, as ``plait expire`` does).
        ``history`` sets new sessions' compaction and history bounds (a session keeps those it
        started with, so it resumes and replays alike); its ``context_window`` defaults to the
        model's.
        ``approval_policy`` is new sessions' default: which MCP calls wait for a decision
        (``never``, ``on-request``, ``on-write``, ``untrusted``). ``approver`` decides them (a
        function or an async function of an ``ApprovalRequest``, returning an
        ``ApprovalDecision``); a call it has not decided within ``approval_timeout_sec`` is
        denied, and so is every call that asks when there is no approver.
        ``model_client``, ``mcp_factory`` and ``approval_gate`` replace the model client, the
        MCP servers and the approver: this is how replay answers them from the log.
        Everything else is for everyone.
        """
        _check_policy(approval_policy)
        self._owns_store = not isinstance(store, EventStore)
        self.store = store if isinstance(store, EventStore) else open_store(store)
        self.settings = model or ModelSettings()
        self.new_id = new_id or (lambda: str(uuid.uuid4()))
        self.workdir = str(workdir)
        self.max_interrupt_chain_depth = max_interrupt_chain_depth
        self.mcp_servers = dict(mcp_servers or {})
        """MCP servers by name; each session starts its own, in the background."""
        self.mcp_limits = mcp_limits
        self.effects = EffectLoop()
        self.client = model_client if model_client is not None else ModelClient(self.settings)
        self.mcp_factory = mcp_factory
        self.storage_policy = storage_policy or StoragePolicy()
        self.approval_policy: ApprovalPolicy = approval_policy
        self.approval_gate = approval_gate or ApprovalGate(approver, approval_timeout_sec)
        self.history = history or HistorySettings()
        if self.history.context_window is None:
            window = self.settings.context_window
            self.history = msgspec.structs.replace(self.history, context_window=window)
        self._sessions: dict[str, SessionHandle] = {}
        self._expiry = Expiry(self.store)
        self._expiring = threading.Event()  # set: stop sweeping
        self._expire_every_sec = expire_every_sec
        self._sweeper: threading.Thread | None = None
        if self.storage_policy.kind == "ttl":
            self._sweep_from_now()

    def _deps(self, journal: Journal, pool: Any, past: list[Event]) -> ConversationDeps:
        """What the session's conversations share; behaviour that changed over time follows
        what the session recorded at its start, so it resumes (and replays) as it ran."""
        started = past[0].body if past else None
        recorded = started.settings if isinstance(started, SessionStarted) else None
        return ConversationDeps(
            journal,
            self.effects,
            self.client,
            self.settings.model,
            self.new_id,
            self.workdir,
            self.max_interrupt_chain_depth,
            pool,
            (recorded or RuntimeSettings()).history,
            approval_gate=self.approval_gate,
            interrupt_checkpoints=recorded is not None and recorded.interrupt_checkpoints,
            model_protocol=recorded.model_protocol if recorded is not None else 0,
            # The request options are this runtime's, as its model name is (a resume may ask
            # for others); how the prompt is encoded stays as the session started.
            model_options=msgspec.structs.replace(
                self.settings.options(),
                send_reasoning=recorded is not None and recorded.model.send_reasoning,
            ),
        )

    def _recorded(self) -> RuntimeSettings:
        """This runtime's configuration, as a session's first event keeps it for replay."""
        limits = self.mcp_limits or McpLimits()
        return RuntimeSettings(
            self.max_interrupt_chain_depth,
            sorted(self.mcp_servers),
            limits.per_session,
            limits.per_conversation,
            limits.per_conversation_rate,
            limits.rate_window_sec,
            str(Path(self.workdir).resolve()),
            self.history,
            interrupt_checkpoints=True,
            model_protocol=MODEL_PROTOCOL,
            model=self.settings.options(),
            resume_markers=True,
        )

    def start_session(
        self,
        *,
        base_instructions: str | None = None,
        user_instructions: str | None = None,
        mcp_allowlist: list[str] | None = None,
        storage_policy: StoragePolicy | None = None,
        approval_policy: ApprovalPolicy | None = None,
    ) -> SessionHandle:
        """Start a new session with its root conversation; it is stored from its first event.

        ``storage_policy`` (the runtime's by default) is the root's, and so, inherited, every
        conversation's of the session. ``approval_policy`` (the runtime's by default) is the
        session's for good: resumed, it keeps it; its conversations may only narrow it.
        """
        policy = self.approval_policy if approval_policy is None else approval_policy
        _check_policy(policy)
        session_id, root = self.new_id(), self.new_id()
        journal = Journal(self.store, session_id)
        opened = ConversationOpened(
            base_instructions=base_instructions,
            user_instructions=user_instructions,
            mcp_allowlist=mcp_allowlist,
            storage_policy=storage_policy or self.storage_policy,
        )
        started = SessionStarted(
            root, model=self.settings.model, settings=self._recorded(), approval_policy=policy
        )
        past = journal.record([started, NewEvent(opened, root)])
        return self._attach(journal, root, past)

    def resume(self, session_id: str) -> SessionHandle:
        """Continue a stored session where it was; a task cut off by a crash is aborted.

        Raises ``ContentUnavailableError`` (and records nothing) when a live conversation's
        content is not in the log: its storage policy did not keep it, or it expired.
        """
        if session_id in self._sessions:
            return self._sessions[session_id]
        past = self._read_session(session_id)
        return self._resume(session_id, past, _scheduled(past))

    def _resume(self, session_id: str, past: list[Event], state: SchedulerState) -> SessionHandle:
        """Resume from ``past``, whose tasks ``state`` folds; if any was running or waiting,
        ``SessionResumed`` marks where this process took over."""
        plan = state.running
        destroyed = {e.conversation_id for e in past if isinstance(e.body, ConversationDestroyed)}
        missing = missing_content(past, lambda cid: cid is not None and cid not in destroyed)
        if missing:
            raise ContentUnavailableError(session_id, "resume", missing)
        journal = Journal(self.store, session_id, past)
        started = past[0].body
        assert isinstance(started, SessionStarted)  # read_session and in_flight check it
        root = started.root_conversation_id
        calls = open_calls(past, plan.task_id) if plan is not None else OpenCalls()
        if plan is None or not (calls.rerun and self.mcp_servers):
            if plan is not None or state.pending:
                past += _took_over(journal, past, state, calls.ending() if plan is not None else [])
            handle = self._attach(journal, root, past)
            handle._scheduler.tell("kick")
            return handle
        # Safe calls run again: recorded started, as the first thing this process does.
        past += _took_over(journal, past, state, [*calls.rerun, *calls.denials])
        handle = self._attach(journal, root, past)
        handle._rerun = Rerun.start(journal, handle._pool, handle._scheduler, plan, calls)
        return handle

    def recover(self) -> list[Recovery]:
        """Resume every stored session a process left with a task running or waiting.

        A session that cannot be resumed (its content is not in the log) still has its
        cut-off task ended ``crashed``; its ``Recovery`` says why it was not resumed.
        """
        found: list[Recovery] = []
        for session_id, past, state in in_flight(self.store):
            if session_id in self._sessions:
                continue
            plan, waiting = state.running, len(state.pending)
            crashed = plan.task_id if plan is not None else None
            try:
                self._resume(session_id, past, state)
            except ContentUnavailableError as exc:
                if plan is not None:
                    ending = open_calls(past, plan.task_id).ending()
                    _took_over(Journal(self.store, session_id, past), past, state, ending)
                found.append(Recovery(session_id, crashed, waiting, exc.reason))
            else:
                found.append(Recovery(session_id, crashed, waiting))
        return found

    def expire_content(self, now: datetime | None = None) -> int:
        """Delete ``ttl`` conversations' content that is due by ``now`` (the store's clock by
        default); return how many blobs."""
        return self._expiry.sweep(now)

    def _sweep_from_now(self) -> None:
        """Start sweeping (once): ``ttl`` content is in use."""
        if self._sweeper is not None or self._expire_every_sec is None:
            return
        self._sweeper = threading.Thread(
            target=self._expire_every, args=(self._expire_every_sec,), daemon=True
        )
        self._sweeper.start()

    def _expire_every(self, interval: float) -> None:
        while True:
            try:
                self._expiry.sweep()
            except PlaitError as exc:  # a store error now; the next sweep tries again
                log.warning("expiring ttl content failed: %s", exc)
            if self._expiring.wait(interval):
                return

    def _read_session(self, session_id: str) -> list[Event]:
        past = self.store.read(session_id)
        if not past or not isinstance(past[0].body, SessionStarted):
            raise PlaitError(f"no session {session_id} in the store")
        return past

    def _attach(self, journal: Journal, root: str, past: list[Event]) -> SessionHandle:
        if journal.expires:
            self._sweep_from_now()
        handle = SessionHandle(self, journal, root, past)
        self._sessions[journal.stream] = handle
        return handle

    def close(self, timeout: float = 10.0) -> None:
        """Close every session, the effect loop and the store (if the runtime opened it)."""
        self._expiring.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout)  # before the store closes under it
        for handle in list(self._sessions.values()):
            handle.close(timeout)
        with contextlib.suppress(Exception):
            self.effects.submit(self.client.aclose()).result(timeout)
        self.effects.close()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
