"""``SessionHandle``: what an embedder holds to drive one session, from any thread."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from plait._jsonvalue import JsonObject
from plait.events import (
    ApprovalPolicy,
    Event,
    InputItem,
    InputText,
    TaskPlan,
    ToolPrefs,
    Transient,
)
from plait.runtime._acks import Ack
from plait.runtime._changes import KEEP, KeepType, context_change
from plait.runtime._host import CLOSED_BY
from plait.runtime._inputs import check_input, check_inputs
from plait.runtime._outcome import TaskOutcome, await_outcome, await_outcome_async
from plait.runtime._views import SessionViews

if TYPE_CHECKING:
    from plait.runtime._host import SessionHost

__all__ = ["SessionHandle"]


class SessionHandle(SessionViews):
    """Drives one session of a ``Runtime``; all methods are safe from any thread.

    A session another process owns is *followed*: its commands go to the owner's inbox, its
    events come from the log (docs/processes.md).
    """

    _host: SessionHost[SessionHandle]

    def __init__(self, host: SessionHost[SessionHandle]) -> None:
        """(Made by the runtime: a ``SessionHost`` owns the session's life.)"""
        self.runtime = host.runtime
        self.session_id = host.session_id
        """The session id (its stream in the store)."""
        self.root_conversation_id = host.root_conversation_id
        """The root conversation, which cannot be destroyed."""
        self._host = host

    @property
    def state(self) -> str:
        """Where the session is in this process: ``followed``, ``starting``, ``active``,
        ``passive``, ``draining``, ``closing``, ``closed``, ``failed`` or ``lost``
        (docs/processes.md#a-sessions-life)."""
        return self._host.state.value

    @property
    def closed(self) -> bool:
        """Whether the session takes no more work here (closed by this handle or the runtime's
        close, handed back, failed, or lost to another process)."""
        return self._host.closed

    @property
    def followed(self) -> bool:
        """Whether another process owns the session (its commands go to that owner's inbox)."""
        return self._host.followed

    @property
    def passive(self) -> bool:
        """Whether the session's actors are stopped because it was idle
        (``RuntimeSettings(idle_sec=)``); the next call that needs them brings them back from the
        log."""
        return self._host.passive

    def passivate(self, timeout: float = 10.0) -> bool:
        """Stop the session's actors, and release their threads, if nothing runs or waits in it;
        return whether it did. The handle stays usable: the next call starts them again."""
        return self._host.passivate(timeout)

    def passivate_if_free(self) -> bool:
        """``passivate``, unless another thread is using the session; return whether it did."""
        return self._host.passivate_if_free()

    def idle_now(self) -> bool:
        """Whether its actors run with nothing running or queued (by what it recorded)."""
        return self._host.idle_now()

    def idle_for(self) -> float:
        """Seconds since the session was last used or recorded anything."""
        return self._host.idle_for()

    @property
    def later_servers(self) -> frozenset[str]:
        """The MCP servers its actors start at their first call, not now: those whose tools
        its log lists (docs/tools.md#started-when-needed); none while it is passive."""
        pool = self._host.pool
        return frozenset() if pool is None else pool.later

    def _placed_tell(
        self, prompt: str | Sequence[InputItem], cid: str | None, task_id: str | None, ack: Ack
    ) -> None:
        """``_tell``, once the session has a place (``asubmit``); the id is made off the loop."""
        host = self._host
        with host.lock:
            if host.closed:  # closed while it waited: it needs no place
                self.runtime.admission.leave(host)
            host.wake()
        plan = self._plan(prompt, cid, task_id)
        ack.task_id = plan.task_id
        self._host.tell(plan, ack)

    def _plan(
        self, prompt: str | Sequence[InputItem], cid: str | None, task_id: str | None = None
    ) -> TaskPlan:
        items: list[InputItem] = [InputText(prompt)] if isinstance(prompt, str) else list(prompt)
        task_id = task_id or self.runtime.settings.new_id()
        return TaskPlan(task_id, cid or self.root_conversation_id, items)

    def submit(
        self,
        prompt: str | Sequence[InputItem],
        *,
        conversation_id: str | None = None,
        task_id: str | None = None,
    ) -> str:
        """Queue a task in a conversation (the root by default); return its task id once the
        task is in the log (``TaskEnqueued``, durable).

        ``task_id`` names the task (by default a new id): a submit made again with the id of a
        task the session holds, by this process or another after a crash or a lost answer,
        queues nothing and returns once that task is in the log
        (docs/processes.md#each-command-takes-effect-once).

        Raises ``UnknownConversationError`` when the session has no such live conversation,
        ``SessionClosedError`` once it is closed, ``InvalidInputError`` for text UTF-8 cannot
        encode (a lone surrogate).
        """
        check_inputs(prompt=prompt, conversation_id=conversation_id, task_id=task_id)
        return self._host.queue(self._plan(prompt, conversation_id, task_id))

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
        self,
        prompt: str | Sequence[InputItem],
        *,
        conversation_id: str | None = None,
        task_id: str | None = None,
    ) -> str:
        """``submit`` for asyncio code: it waits on the loop, holding no thread, for a place
        (``max_active_sessions``) and for the task to be durable; the rest runs off the loop."""
        check_inputs(prompt=prompt, conversation_id=conversation_id, task_id=task_id)
        if self._host.passive:
            await self.runtime.admission.aenter(self._host)
        ack = Ack(self._host.acks)
        placed = functools.partial(self._placed_tell, prompt, conversation_id, task_id, ack)
        self.runtime.off_loop.send(placed, ack)
        await ack.arrived()
        return ack.task_id

    async def ainterrupt(self) -> None:
        """``interrupt`` for asyncio code (it does not block)."""
        self.interrupt()

    async def aclose(self, timeout: float = 10.0, *, reason: str = CLOSED_BY) -> None:
        """``close`` for asyncio code: it waits on the loop; stopping the actors runs off it."""
        host = self._host
        with self._follow() as feed:
            state = await self.runtime.off_loop(functools.partial(host.begin_close, timeout))
            if state is not None and state.running is not None:
                await await_outcome_async(feed, state.running.task_id, timeout, False)
        if state is not None:
            await self.runtime.off_loop(functools.partial(host.finish_close, timeout, reason))

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
        return self._host.queue(TaskPlan(self.runtime.settings.new_id(), cid, context=change))

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
        plan = TaskPlan(self.runtime.settings.new_id(), cid, compact=keep_recent_tokens)
        with self._follow() as feed:
            return await_outcome(feed, self._host.queue(plan), timeout)

    def interrupt(self) -> None:
        """Abort the running task (``TurnAborted(interrupted)``) and drop the chain it started."""
        self._host.interrupt()

    def destroy(self, conversation_id: str) -> JsonObject:
        """Destroy a conversation; returns ``{"ok": true}`` or ``{"ok": false, "reason": ...}``
        (followed: ``{"ok": true, "queued": id}`` once the owner's inbox has it)."""
        return self._host.destroy(conversation_id)

    def release(
        self, timeout: float = 60.0, *, grace_sec: float | None = None, reason: str = ""
    ) -> bool:
        """Hand the session back for another process to own (a process that drains): take no
        more work for it, let what is queued run for up to ``timeout`` seconds, stop the actors,
        release the lease. Return whether nothing was left waiting (what was is in the log, for
        the next owner; a task cut off ends ``crashed`` there).

        With ``grace_sec`` (a process that stops on purpose, docs/processes.md#stopping), no
        waiting task starts: the running one starts no new model request or tool call and
        ends at its next checkpoint, ``TurnAborted(cause="shutdown")`` with ``reason`` as its
        detail; if it has not within ``grace_sec`` seconds, it is cut where it is. The lease
        is released at once: the next process goes on without waiting for it."""
        return self._host.release(timeout, grace_sec=grace_sec, reason=reason)

    def close(self, timeout: float = 10.0, *, reason: str = CLOSED_BY) -> None:
        """Cancel a running task, wait up to ``timeout`` seconds, stop the actors, record the close
        (``SessionClosed(reason)``: say who closed it).

        A task that has not stopped by then is force-aborted (``TurnAborted(interrupted)``,
        its open calls answered) and recorded so. Closing twice is harmless.
        """
        self._host.close(timeout, reason)
