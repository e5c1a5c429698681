"""``SessionHandle``: what an embedder holds to drive one session, from any thread."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import pykka

from plait.actors.journal import Journal
from plait.actors.messages import Destroy, Enqueue, GetQueue, Interrupt
from plait.actors.session import Session
from plait.errors import LeaseLostError, PlaitError, SessionClosedError, UnknownConversationError
from plait.events.ownership import DestroyConversation, InterruptTask, SubmitTask
from plait.events.projections.tasks import QueueSnapshot
from plait.events.types import Event, SessionClosed, Transient
from plait.events.values import (
    ApprovalPolicy,
    InputItem,
    InputText,
    TaskPlan,
    ToolPrefs,
)
from plait.runtime import supervision
from plait.runtime.acks import ACK_WAIT_SEC, Ack
from plait.runtime.changes import KEEP, KeepType, context_change
from plait.runtime.inputs import check_input, check_inputs
from plait.runtime.outcome import TaskOutcome, await_outcome, await_outcome_async
from plait.runtime.recovery import forced_close
from plait.runtime.release import SessionRelease
from plait.runtime.views import SessionViews

if TYPE_CHECKING:
    from plait.runtime.runtime import Runtime

__all__ = ["SessionHandle"]


class SessionHandle(SessionViews, SessionRelease):
    """Drives one session of a ``Runtime``; all methods are safe from any thread.

    A session another process owns is *followed*: its commands go to the owner's inbox, its
    events come from the log (docs/processes.md).
    """

    def __init__(
        self,
        runtime: Runtime,
        journal: Journal,
        root_id: str,
        past: list[Event],
        *,
        followed: bool = False,
    ) -> None:
        self.runtime = runtime
        self.session_id = journal.stream
        """The session id (its stream in the store)."""
        self.root_conversation_id = root_id
        """The root conversation, which cannot be destroyed."""
        self._journal = journal
        self._pool: Any = None
        self._rerun: Any = None  # runs again the calls a crash cut off, then ends that task
        self._closed = False
        self._lock = threading.RLock()  # what reaches the actors, and stopping or starting them
        self._changed = threading.Condition(self._lock)  # told when it is passivated or started
        self._active = False
        self._used = time.monotonic()
        self._acks: set[Ack] = set()  # told to the actors, not yet durable (see Ack)
        self._followed = followed  # another process owns the session (runtime.followers)
        self._takes_over = followed  # and this process takes it over once its lease is free
        self._gone: Exception | None = None  # why it closed, if another process took it
        self._dropping: threading.Event | None = None  # set: stopped, as it failed or was lost
        journal.on_idle = runtime._admission.went_idle
        journal.on_lost = self._lose
        journal.may_act = lambda: runtime.owner.still_owns(self.session_id)
        if not followed:
            with self._lock:  # an actor that fails to start stops them once they all are
                self._own(past)

    def _own(self, past: list[Event]) -> None:
        """Start the actors from ``past`` in a place ``Admission`` gives (given back if they
        do not start)."""
        self.runtime._admission.enter(self)
        try:
            self._start(past)
        finally:
            if not self._active:
                self.runtime._admission.leave(self)

    def _start(self, past: list[Event]) -> None:
        """Start the session's actors (and MCP servers) from its log."""
        runtime, journal = self.runtime, self._journal
        since = journal.listeners.mark()  # what is recorded after ``past`` reaches the actors
        self._pool = runtime._start_pool(journal, past)
        deps = runtime._deps(journal, self._pool, past)
        self._actor = Session.start(journal, deps, self.root_conversation_id, past, since)
        self._active = True

    @property
    def closed(self) -> bool:
        """Whether the session is closed (by this handle, or by the runtime's close)."""
        return self._closed

    @property
    def followed(self) -> bool:
        """Whether another process owns the session (its commands go to that owner's inbox)."""
        return self._followed

    @property
    def passive(self) -> bool:
        """Whether the session's actors are stopped because it was idle (``Runtime(idle_sec=)``);
        the next call that needs them brings them back from the log."""
        return not self._active and not self._closed and not self._followed

    def passivate(self, timeout: float = 10.0) -> bool:
        """Stop the session's actors, and release their threads, if nothing runs or waits in it;
        return whether it did. The handle stays usable: the next call starts them again."""
        with self._lock:
            state = None if not self._active or self._closed else self._queue_now(timeout)
            if state is None or not state.idle:
                return False
            self._stop_actors(timeout)
            self._changed.notify_all()
            return True

    def idle_now(self) -> bool:
        """Whether its actors run with nothing running or queued (by what it recorded)."""
        return self._active and self._journal.idle

    def passivate_if_free(self) -> bool:
        """``passivate``, unless another thread is using the handle; return whether it did."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self.idle_now() and self.passivate()
        finally:
            self._lock.release()

    def idle_for(self) -> float:
        """Seconds since the session was last used or recorded anything."""
        return time.monotonic() - max(self._used, self._journal.last_recorded_at)

    def _activate(self) -> None:
        """Make sure the actors run (bring a passive session back from its log); hold the lock."""
        self._used = time.monotonic()
        if not self._active and not self._closed and not self._followed:
            self._journal.unseal()
            self._own(self.runtime.store.read(self.session_id))
            self._changed.notify_all()

    def _placed_tell(self, prompt: str | Sequence[InputItem], cid: str | None, ack: Ack) -> None:
        """``_tell``, once the session has a place (``asubmit``); the id is made off the loop."""
        with self._lock:
            if self._closed:  # closed while it waited: it needs no place
                self.runtime._admission.leave(self)
            self._activate()
        plan = self._plan(prompt, cid)
        ack.task_id = plan.task_id
        self._tell(plan, ack)

    def _tell(self, plan: TaskPlan, ack: Ack) -> None:
        """Queue ``plan`` (for a conversation the actors know); ``ack`` hears once it is durable.
        Followed: the owner's inbox has it, durable."""
        with self._lock:
            self._check_open()
            self._activate()
            cid = plan.conversation_id
            if cid != self.root_conversation_id and cid not in {c.id for c in self.conversations()}:
                raise UnknownConversationError(self.session_id, cid)  # else it waits for ever
            if self._followed:
                self.runtime.owner.send(self.session_id, SubmitTask(plan))
                return ack()
            self._acks.add(ack)
            self._actor.tell(Enqueue((plan,), ack))

    def _plan(self, prompt: str | Sequence[InputItem], cid: str | None) -> TaskPlan:
        items: list[InputItem] = [InputText(prompt)] if isinstance(prompt, str) else list(prompt)
        return TaskPlan(self.runtime.new_id(), cid or self.root_conversation_id, items)

    def _queue(self, plan: TaskPlan) -> str:
        """``_tell`` ``plan``, and return its id once it is durable."""
        ack = Ack(self._acks)
        self._tell(plan, ack)
        ack.wait(ACK_WAIT_SEC, f"task {plan.task_id} of session {self.session_id}")
        return plan.task_id

    def submit(
        self, prompt: str | Sequence[InputItem], *, conversation_id: str | None = None
    ) -> str:
        """Queue a task in a conversation (the root by default); return its task id once the
        task is in the log (``TaskEnqueued``, durable).

        Raises ``UnknownConversationError`` when the session has no such live conversation,
        ``SessionClosedError`` once it is closed, ``InvalidInputError`` for text UTF-8 cannot
        encode (a lone surrogate).
        """
        check_inputs(prompt=prompt, conversation_id=conversation_id)
        return self._queue(self._plan(prompt, conversation_id))

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
        with self._follow(on_item is not None) as feed:
            task_id = self.submit(prompt, conversation_id=conversation_id)
            return await_outcome(feed, task_id, timeout, on_item=on_item)

    async def arun(
        self,
        prompt: str | Sequence[InputItem],
        *,
        conversation_id: str | None = None,
        timeout: float | None = None,
    ) -> TaskOutcome:
        """``run`` for asyncio code: waits on the event feed, on the caller's loop, holding no
        thread; thousands of them wait at once for the cost of their memory."""
        with self._follow() as feed:
            task_id = await self.asubmit(prompt, conversation_id=conversation_id)
            return await await_outcome_async(feed, task_id, timeout)

    async def asubmit(
        self, prompt: str | Sequence[InputItem], *, conversation_id: str | None = None
    ) -> str:
        """``submit`` for asyncio code: it waits on the loop, holding no thread, for a place
        (``max_active_sessions``) and for the task to be durable; the rest runs off the loop."""
        check_inputs(prompt=prompt, conversation_id=conversation_id)
        if not self._active and not self._closed and not self._followed:
            await self.runtime._admission.aenter(self)
        ack = Ack(self._acks, asyncio.get_running_loop())
        placed = functools.partial(self._placed_tell, prompt, conversation_id, ack)
        self.runtime._off_loop.send(placed, ack)
        await ack.arrived()
        return ack.task_id

    async def ainterrupt(self) -> None:
        """``interrupt`` for asyncio code (it does not block)."""
        self.interrupt()

    async def aclose(self, timeout: float = 10.0) -> None:
        """``close`` for asyncio code: it waits on the loop; stopping the actors runs off it."""
        with self._follow() as feed:
            state = await self.runtime._off_loop(functools.partial(self._begin_close, timeout))
            if state is not None and state.running is not None:
                await await_outcome_async(feed, state.running.task_id, timeout, False)
        if state is not None:
            await self.runtime._off_loop(functools.partial(self._finish_close, timeout))

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
        change = context_change(
            clear_history,
            base_instructions=base_instructions,
            user_instructions=user_instructions,
            mcp_allowlist=mcp_allowlist,
            tool_prefs=tool_prefs,
            approval_policy=approval_policy,
        )
        check_inputs(conversation_id=conversation_id)
        check_input("", change)  # names the field: ``user_instructions is not valid text...``
        cid = conversation_id or self.root_conversation_id
        return self._queue(TaskPlan(self.runtime.new_id(), cid, context=change))

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
        cid = conversation_id or self.root_conversation_id
        if keep_recent_tokens is None:
            keep_recent_tokens = self.runtime.history.keep_recent_tokens
        plan = TaskPlan(self.runtime.new_id(), cid, compact=keep_recent_tokens)
        with self._follow() as feed:
            return await_outcome(feed, self._queue(plan), timeout)

    def interrupt(self) -> None:
        """Abort the running task (``TurnAborted(interrupted)``) and drop the chain it started."""
        with self._lock:
            if self._followed:
                self.runtime.owner.send(self.session_id, InterruptTask())
            elif self._active:  # a passive session has nothing to interrupt
                self._actor.tell(Interrupt())

    def destroy(self, conversation_id: str) -> dict[str, Any]:
        """Destroy a conversation; returns ``{"ok": true}`` or ``{"ok": false, "reason": ...}``
        (followed: ``{"ok": true, "queued": id}`` once the owner's inbox has it)."""
        with self._lock:
            self._check_open()
            if self._followed:
                cid = self.runtime.owner.send(self.session_id, DestroyConversation(conversation_id))
                return {"ok": True, "queued": cid}
            self._activate()
            return cast(dict[str, Any], self._actor.ask(Destroy(conversation_id), timeout=30))

    def _check_open(self) -> None:
        if self._closed:
            raise self._gone or SessionClosedError(self.session_id)

    def _lose(self, error: PlaitError) -> None:
        """Another process took the session, an actor broke or the store failed a write: stop
        here, raise ``error`` to every waiter (docs/failures.md#supervision)."""
        supervision.start_drop_out(self, error)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel a running task, wait up to ``timeout`` seconds, stop the actors, record the close.

        A task that has not stopped by then is force-aborted (``TurnAborted(interrupted)``,
        its open calls answered) and recorded so. Closing twice is harmless.
        """
        if self._dropping is not None:  # it failed: what it records is recorded before
            self._dropping.wait(timeout)
        with self._follow() as feed:
            state = self._begin_close(timeout)
            if state is not None and state.running is not None:
                await_outcome(feed, state.running.task_id, timeout, raise_timeout=False)
        if state is not None:
            self._finish_close(timeout)

    def _begin_close(self, timeout: float) -> QueueSnapshot | None:
        """Mark the session closed and interrupt its running task; ``None`` if it was closed."""
        with self._lock:
            if self._closed:
                return None
            self._closed = True
            if self._followed:  # another process owns it: only the following ends
                self.runtime.followers.remove(self)
                self.runtime._sessions.pop(self.session_id, None)
                return None
            if not self._active:  # passive: nothing runs
                return QueueSnapshot()
            state = self._queue_now(timeout)
            if state is not None and state.running is not None:
                self._actor.tell(Interrupt("close"))
            return state

    def _queue_now(self, timeout: float) -> QueueSnapshot | None:
        """What runs and waits; ``None`` if the session broke answering (its drop-out, begun,
        ends it: docs/failures.md#supervision)."""
        state = self._actor.ask(GetQueue(), timeout=timeout)
        return state if isinstance(state, QueueSnapshot) else None

    def _finish_close(self, timeout: float) -> None:
        """Stop the actors, end a task that did not stop in time, record the close."""
        self._stop(timeout)
        # A task that did not stop in time is ended here: no actor can record any more.
        ended = forced_close(self.runtime.store.read(self.session_id), timeout)
        try:
            self._journal.record_last([*ended, SessionClosed("closed by the embedder")])
        except LeaseLostError:  # another process took it meanwhile: its close is not ours
            self.runtime.owner.forget(self.session_id)
            raise
        self.runtime.owner.release(self.session_id)

    def _stop(self, timeout: float) -> None:
        """Stop the session's actors and servers, recording nothing."""
        with self._lock:
            self._closed = True
            if self._active:
                self._stop_actors(timeout)
        self.runtime._sessions.pop(self.session_id, None)

    def _crash(self, timeout: float) -> None:
        """``_stop`` as a crash does: the lease is left lapsed (replay's crash points, tests)."""
        self._stop(timeout)
        self.runtime.owner.release(self.session_id, idle=False)

    def _stop_actors(self, timeout: float, error: Exception | None = None) -> None:
        """Stop the actors and servers; the journal records nothing from them after this.
        A submission they did not take fails with ``error`` (else: the session is closed)."""
        self._active = False
        self.runtime._admission.leave(self)
        self._journal.seal()  # an actor stuck past the timeout cannot write after this
        stuck = (pykka.ActorDeadError, pykka.Timeout)  # a stuck actor is left behind, not waited
        with contextlib.suppress(*stuck):
            self._actor.stop(timeout=timeout)
        self._journal.flush()  # what an actor made ahead is written before the log is read
        for ack in list(self._acks):  # what the stopped actor did not take: not in the log
            ack(error or SessionClosedError(self.session_id))
        if self._pool is not None:
            with contextlib.suppress(*stuck):
                self._pool.stop(timeout=timeout)  # closes every server: nothing is left running
        if self._rerun is not None:
            with contextlib.suppress(*stuck):
                self._rerun.stop(timeout=timeout)
            self._rerun = None
