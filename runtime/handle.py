"""``SessionHandle``: what an embedder holds to drive one session, from any thread."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import pykka

from plait.actors.feed import DEFAULT_FEED_LIMIT, Feed
from plait.actors.journal import Journal
from plait.actors.messages import (
    Destroy,
    Enqueue,
    GetHistory,
    GetQueue,
    Interrupt,
    ListConversations,
)
from plait.actors.session import Session
from plait.errors import (
    SessionClosedError,
    UnknownConversationError,
)
from plait.events.projections.history import (
    ConversationInfo,
    Histories,
    HistoryProjection,
    conversation_index,
)
from plait.events.projections.stats import ConversationStats, StatsProjection
from plait.events.projections.tasks import QueueSnapshot
from plait.events.types import (
    Event,
    FeedLagged,
    SessionClosed,
    Transient,
)
from plait.events.values import (
    ApprovalPolicy,
    InputItem,
    InputText,
    TaskPlan,
    ToolPrefs,
)
from plait.runtime.acks import ACK_WAIT_SEC, Ack
from plait.runtime.changes import KEEP, KeepType, context_change
from plait.runtime.outcome import FOLLOWED, TaskOutcome, await_outcome, await_outcome_async
from plait.runtime.recovery import forced_close

if TYPE_CHECKING:
    from plait.runtime.runtime import Runtime

__all__ = ["SessionHandle"]


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
        self._closed = False
        self._lock = threading.RLock()  # what reaches the actors, and stopping or starting them
        self._changed = threading.Condition(self._lock)  # told when it is passivated or started
        self._active = False
        self._used = time.monotonic()
        self._acks: set[Ack] = set()  # told to the actors, not yet durable (see Ack)
        journal.on_idle = runtime._admission.went_idle
        runtime._admission.enter(self)
        self._start_placed(past)

    def _start(self, past: list[Event]) -> None:
        """Start the session's actors (and MCP servers) from its log."""
        runtime, journal = self.runtime, self._journal
        if runtime.mcp_servers:
            from plait.actors.pool import McpPool

            self._pool = McpPool.start(
                journal,
                runtime._loop,
                runtime.mcp_servers,
                past,
                runtime.mcp_limits,
                runtime._mcp_factory,
            )
        deps = runtime._deps(journal, self._pool, past)
        self._actor = Session.start(journal, deps, self.root_conversation_id, past)
        self._active = True

    def _start_placed(self, past: list[Event]) -> None:
        """Start the actors in the place ``Admission`` gave; if they do not start, give it back."""
        try:
            self._start(past)
        finally:
            if not self._active:
                self.runtime._admission.leave(self)

    @property
    def closed(self) -> bool:
        """Whether the session is closed (by this handle, or by the runtime's close)."""
        return self._closed

    @property
    def passive(self) -> bool:
        """Whether the session's actors are stopped because it was idle (``Runtime(idle_sec=)``);
        the next call that needs them brings them back from the log."""
        return not self._active and not self._closed

    def passivate(self, timeout: float = 10.0) -> bool:
        """Stop the session's actors, and release their threads, if nothing runs or waits in it;
        return whether it did. The handle stays usable: the next call starts them again."""
        with self._lock:
            if not self._active or self._closed or not self._queue_now(timeout).idle:
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
        if not self._active and not self._closed:
            self.runtime._admission.enter(self)
            self._journal.unseal()
            self._start_placed(self.runtime.store.read(self.session_id))
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
        """Queue ``plan`` (for a conversation the actors know); ``ack`` hears once it is durable."""
        with self._lock:
            self._check_open()
            self._activate()
            if plan.conversation_id != self.root_conversation_id:  # else it waits for ever
                _, index = self._ask_live(ListConversations())
                if plan.conversation_id not in {info.id for info in index}:
                    raise UnknownConversationError(self.session_id, plan.conversation_id)
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
        ``SessionClosedError`` once it is closed.
        """
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
        if not self._active and not self._closed:
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
            if self._active:  # a passive session has nothing to interrupt
                self._actor.tell(Interrupt())

    def destroy(self, conversation_id: str) -> dict[str, Any]:
        """Destroy a conversation; returns ``{"ok": true}`` or ``{"ok": false, "reason": ...}``."""
        with self._lock:
            self._check_open()
            self._activate()
            return cast(dict[str, Any], self._actor.ask(Destroy(conversation_id), timeout=30))

    def subscribe(self, *, transient: bool = True, limit: int = DEFAULT_FEED_LIMIT) -> Feed:
        """Return a live feed of the session's events from now on.

        Its transient text deltas come too, unless ``transient`` is false: a waiter that reads
        only events is then not woken for every streamed fragment. It holds at most ``limit``
        items not yet read: a reader that far behind gets a ``FeedLagged`` with the seq to
        read the log from (``Feed.catch_up``), not a feed that grows without bound.
        """
        return self._journal.feed(transient, limit)

    def _follow(self, everything: bool = False) -> Feed:
        """A feed for a ``Follower``: what it reads, or every event and text delta."""
        return self._journal.feed(everything, kinds=None if everything else FOLLOWED)

    async def events(self) -> AsyncIterator[Event | Transient]:
        """Iterate over the live feed from asyncio code, until the session closes (``async with
        session.subscribe() as feed: async for item in feed`` does the same, and can stop
        taking text deltas)."""
        with self.subscribe() as feed:
            while (item := await feed.aget(timeout=0.5)) is not None or not self._closed:
                if isinstance(item, FeedLagged):  # what it missed, from the log
                    for event in await asyncio.to_thread(feed.catch_up, item):
                        yield event
                elif item is not None:
                    yield item

    def conversations(self) -> list[ConversationInfo]:
        """The live conversations (``conv.list``), as they are now: a snapshot that later
        changes of the session leave as it is."""
        live, found = self._ask_live(ListConversations())
        if not live:
            return conversation_index(self._folded())
        return list(cast(tuple[ConversationInfo, ...], found))

    def history(self, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """A conversation's history as OpenAI chat messages (the root by default), as it is
        now: the caller owns what it gets."""
        cid = conversation_id or self.root_conversation_id
        live, found = self._ask_live(GetHistory(cid))
        if live:
            messages = None if found is None else list(cast(tuple[dict[str, Any], ...], found))
        else:
            conv = self._folded().conversations.get(cid)
            messages = None if conv is None else [m.to_openai() for m in conv.messages]
        if messages is None:
            raise UnknownConversationError(self.session_id, cid)
        return messages

    def stats(self) -> dict[str, ConversationStats]:
        """Per-conversation metrics, by conversation id: tokens, tool calls, MCP latency,
        cancellations, failures (folded from the log: ``plait stats`` shows the same)."""
        events = self.runtime.store.read(self.session_id, resolve_blobs=False)
        return StatsProjection().fold(events).conversations

    def _ask_live(self, message: Any) -> tuple[bool, Any]:
        """Ask the session actor, if it runs: ``(True, its reply)``; ``(False, None)`` when the
        session is closed or passive (the log has it all, and reading it wakes nothing)."""
        with self._lock:
            if not self._active:
                return False, None
            return True, self._actor.ask(message, timeout=30)

    def _folded(self) -> Histories:
        """The histories folded from the log (once the session's actors are gone)."""
        return HistoryProjection().fold(self.runtime.store.read(self.session_id))

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(self.session_id)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel a running task, wait up to ``timeout`` seconds, stop the actors, record the close.

        A task that has not stopped by then is force-aborted (``TurnAborted(interrupted)``,
        its open calls answered) and recorded so. Closing twice is harmless.
        """
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
            if not self._active:  # passive: nothing runs
                return QueueSnapshot()
            state = self._queue_now(timeout)
            if state.running is not None:
                self._actor.tell(Interrupt("close"))
            return state

    def _queue_now(self, timeout: float) -> QueueSnapshot:
        return cast(QueueSnapshot, self._actor.ask(GetQueue(), timeout=timeout))

    def _finish_close(self, timeout: float) -> None:
        """Stop the actors, end a task that did not stop in time, record the close."""
        self._stop(timeout)
        # A task that did not stop in time is ended here: no actor can record any more.
        ended = forced_close(self.runtime.store.read(self.session_id), timeout)
        self._journal.record_last([*ended, SessionClosed("closed by the embedder")])

    def _stop(self, timeout: float) -> None:
        """Stop the session's actors and servers, recording nothing (as a crash would)."""
        with self._lock:
            self._closed = True
            if self._active:
                self._stop_actors(timeout)
        self.runtime._sessions.pop(self.session_id, None)

    def _stop_actors(self, timeout: float) -> None:
        """Stop the actors and servers; the journal records nothing from them after this."""
        self._active = False
        self.runtime._admission.leave(self)
        self._journal.seal()  # an actor stuck past the timeout cannot write after this
        stuck = (pykka.ActorDeadError, pykka.Timeout)  # a stuck actor is left behind, not waited
        with contextlib.suppress(*stuck):
            self._actor.stop(timeout=timeout)
        for ack in list(self._acks):  # what the stopped actor did not take: not in the log
            ack(SessionClosedError(self.session_id))
        if self._pool is not None:
            with contextlib.suppress(*stuck):
                self._pool.stop(timeout=timeout)  # closes every server: nothing is left running
        if self._rerun is not None:
            with contextlib.suppress(*stuck):
                self._rerun.stop(timeout=timeout)
            self._rerun = None
