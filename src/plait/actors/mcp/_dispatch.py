"""``Dispatcher``: a session's MCP calls, started under its limits from the caller's own thread.

A conversation hands its calls to the dispatcher through the pool's ref (``PoolRef``), not
through the pool's inbox. A call that may start at once is recorded ``ToolCallStarted`` and
submitted to the effect loop on the conversation's thread, and its end, on the loop, frees
its slot and answers the conversation: the pool's thread is in the path of no call that does
not wait. The first calls of a reply are even *held* (their slots taken) before the reply is
recorded, so their ``ToolCallStarted`` joins the reply's group: one durable commit, not two.

Calls that must wait (a limit is reached) are queued in order, and started by the pool's
thread when a slot frees or a rate window has room (``wake``), so that a start's durable
commit never runs on the loop. A lock guards the queue, the slots and the rate windows; it is
never held while recording or waiting, so the loop never waits on a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec
import pykka

from plait.actors._messages import CallTool, ToolFinished, ToolResult
from plait.events import InputImage, McpToolSnapshot, NewEvent, ToolCallStarted

if TYPE_CHECKING:
    from plait.actors._seams import Effects, JournalLike, McpServersLike, Recipient

__all__ = ["Dispatcher", "McpLimits"]

Key = tuple[str, int, int]
"""A call's conversation, turn token and index in the model's reply."""


class McpLimits(msgspec.Struct, frozen=True):
    """How many MCP calls may be in flight at once."""

    per_session: int = 8
    """In the whole session."""
    per_conversation: int = 4
    """In one conversation, under the session's limit."""
    per_conversation_rate: int | None = None
    """Calls one conversation may start within any ``rate_window_sec``; ``None``: no limit."""
    rate_window_sec: float = 60.0
    """The window of ``per_conversation_rate``."""


class _Call(msgspec.Struct):
    request: CallTool
    snapshot: McpToolSnapshot
    server: str
    task: asyncio.Task[None] | None = None
    """The call's task on the loop, once it runs."""
    cancelled: bool = False
    """Its turn was aborted before its task ran."""

    @property
    def key(self) -> Key:
        return (self.request.conversation_id, self.request.token, self.request.index)


class Dispatcher:
    """Starts a session's MCP calls in order under its limits, from any thread."""

    def __init__(
        self,
        journal: JournalLike,
        effects: Effects,
        limits: McpLimits,
        origin: Recipient,
        wake: Callable[[], None],
    ) -> None:
        """``origin``: the pool's ref (starts are recorded as the pool's); ``wake()`` asks the
        pool's thread to call :meth:`dispatch`."""
        self.journal = journal
        self.effects = effects
        self.limits = limits
        self.origin = origin
        self.wake = wake
        self.servers: McpServersLike | None = None
        """The session's ``McpServers`` (or replay's stand-in), once started."""
        self._lock = threading.Lock()
        self._tools: Mapping[str, tuple[McpToolSnapshot, str]] = {}
        self._queue: list[_Call] = []
        self._running: dict[Key, _Call] = {}  # held, being submitted, or on the loop
        self._held: set[Key] = set()
        self._starts: dict[str, deque[float]] = {}  # each conversation's recent call starts

    def offer(self, tools: Mapping[str, tuple[McpToolSnapshot, str]]) -> None:
        """Call the tools named here (each with its server) from now on."""
        self._tools = tools  # replaced whole: a reader sees the old map or the new one

    # --- starting ----------------------------------------------------------------------------

    def hold(self, requests: Sequence[CallTool]) -> list[ToolCallStarted]:
        """Take a slot for each of ``requests`` that may start now, in order, stopping at the
        first that may not; return their ``ToolCallStarted``, for the caller to record
        before it hands them to :meth:`call` (which then records nothing for them)."""
        with self._lock:
            calls = [self._known(request) for request in requests]
            queued = {call.request.conversation_id for call in self._queue}
            known = [call for call in calls if call is not None]
            held = self._pick(known, queued, stop_at_first=True)
            self._held.update(call.key for call in held)
        return [ToolCallStarted(call.request.call_id, call.server) for call in held]

    def call(self, request: CallTool) -> None:
        """Start ``request`` now if a slot is free (else queue it); it ends as a ``ToolFinished``
        told to ``request.reply_to``. A tool the session does not offer is refused."""
        key = (request.conversation_id, request.token, request.index)
        with self._lock:
            held = self._running.get(key) if key in self._held else None
            self._held.discard(key)
            if held is not None:
                held.request = request
            else:
                call = self._known(request)
                if call is not None:
                    self._queue.append(call)
        if held is not None:
            self._submit([held])
        elif call is None:
            result = ToolResult(f"no MCP tool {request.name!r} in this session", "refused")
            _reply(request.reply_to, ToolFinished(request.token, request.index, result))
        else:
            self.dispatch()

    def dispatch(self) -> None:
        """Start every queued call a slot is free for, in order; record their start first."""
        with self._lock:
            sending = self._pick(self._queue, set(), stop_at_first=False)
            taken = {id(call) for call in sending}
            self._queue = [call for call in self._queue if id(call) not in taken]
        started = [
            NewEvent(
                ToolCallStarted(c.request.call_id, c.server),
                c.request.conversation_id,
                c.request.task_id,
            )
            for c in sending
            if not c.request.start_recorded
        ]
        if started:
            self.journal.record(started, origin=self.origin)
        self._submit(sending)

    def _known(self, request: CallTool) -> _Call | None:
        found = self._tools.get(request.name) if self.servers is not None else None
        return None if found is None else _Call(request, *found)

    def _pick(
        self, candidates: list[_Call], blocked: set[str], *, stop_at_first: bool
    ) -> list[_Call]:
        """Take a slot for each candidate that may start now (under the lock); a
        conversation's later calls wait behind its first waiting one (and ``blocked``
        conversations' calls wait)."""
        picked: list[_Call] = []
        for call in candidates:
            conversation = call.request.conversation_id
            mine = sum(1 for key in self._running if key[0] == conversation)
            full = (
                len(self._running) >= self.limits.per_session
                or mine >= self.limits.per_conversation
            )
            if conversation in blocked or full or not self._within_rate(conversation):
                blocked.add(conversation)
            else:
                picked.append(call)
                self._running[call.key] = call
                self._starts.setdefault(conversation, deque()).append(time.monotonic())
                continue
            if stop_at_first:
                break
        return picked

    def _within_rate(self, conversation: str) -> bool:
        """Whether ``conversation`` may start a call now; if not, wake the pool when it may."""
        limit, window = self.limits.per_conversation_rate, self.limits.rate_window_sec
        starts = self._starts.get(conversation)
        if limit is None or not starts:
            return True
        now = time.monotonic()
        while starts and starts[0] <= now - window:
            starts.popleft()
        if len(starts) < limit:
            return True
        delay, loop = starts[0] + window - now, self.effects.loop
        loop.call_soon_threadsafe(lambda: loop.call_later(delay, self.wake))
        return False

    def _submit(self, calls: list[_Call]) -> None:
        """Submit ``calls`` to the loop, unless the session is being stopped."""
        if not calls:
            return
        with self.journal.unsealed() as live:
            if live:  # else being stopped, or no longer this process's: nothing is sent
                for call in calls:
                    self._send(call)
                return
        for call in calls:
            self._free(call)

    def _send(self, call: _Call) -> None:
        # A task made on the loop, rather than EffectLoop.submit's coroutine behind a
        # concurrent future: that future's bookkeeping would run on the loop after the
        # answer, holding the interpreter lock the conversation needs to take it.
        try:
            if self.effects.closed:
                raise RuntimeError("the effect loop is closed")
            self.effects.loop.call_soon_threadsafe(self._start, call)
        except RuntimeError:  # closing: nothing more is sent
            self._free(call)

    def _start(self, call: _Call) -> None:
        """Run the call in a task of its own (on the loop), unless it was cancelled."""
        with self._lock:
            runs = not call.cancelled and self._running.get(call.key) is call
            if runs:
                call.task = asyncio.get_running_loop().create_task(self._run(call))
        if not runs:
            self._free(call)

    async def _run(self, call: _Call) -> None:
        """Make the call, free its slot, and answer the caller."""
        request = call.request
        try:
            assert self.servers is not None  # a call is known only once they are (``_known``)
            done = await self.servers.call(
                call.server, call.snapshot.tool, request.arguments, call_id=request.call_id
            )
            images = tuple(InputImage(f"data:{mime};base64,{data}") for mime, data in done.images)
            result = ToolResult(done.output, done.outcome, done.duration_ms, images, done.control)
        except Exception as exc:  # McpServers.call reports failures as results: this is a bug
            result = ToolResult(f"{request.name} failed: {exc!r}", "error")
        except BaseException:  # cancelled: the turn was aborted, nobody waits for an answer
            self._free(call)
            raise
        self._free(call)  # first, so the caller's next call finds the slot free
        _reply(request.reply_to, ToolFinished(request.token, request.index, result))

    def _free(self, call: _Call) -> None:
        """Free the call's slot (once); wake the pool if calls wait."""
        with self._lock:
            freed = self._running.get(call.key) is call
            if freed:
                del self._running[call.key]
            waiting = freed and bool(self._queue)
        if waiting:
            self.wake()

    # --- stopping ----------------------------------------------------------------------------

    def cancel(self, conversation_id: str, token: int) -> None:
        """Drop the queued and cancel the running calls of a turn that was aborted."""
        turn = (conversation_id, token)
        with self._lock:
            self._queue = [c for c in self._queue if c.key[:2] != turn]
            tasks = []
            for key, call in list(self._running.items()):
                if key[:2] != turn:
                    continue
                if call.task is not None:
                    tasks.append(call.task)  # its slot frees when it ends
                elif key in self._held:
                    self._held.discard(key)
                    del self._running[key]
                else:
                    call.cancelled = True  # its task does not run
        self._cancel(tasks)

    def stop(self) -> None:
        """Cancel every call on the loop."""
        with self._lock:
            for call in self._running.values():
                call.cancelled = True
            tasks = [c.task for c in self._running.values() if c.task is not None]
        self._cancel(tasks)

    def _cancel(self, tasks: list[asyncio.Task[None]]) -> None:
        """Cancel ``tasks`` on the loop: the SDK tells each server to cancel its call."""
        if tasks and not self.effects.closed:
            with contextlib.suppress(RuntimeError):  # the loop is closed meanwhile
                self.effects.loop.call_soon_threadsafe(lambda: [t.cancel() for t in tasks])


def _reply(ref: Recipient, message: object) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the conversation was destroyed meanwhile
        ref.tell(message)
