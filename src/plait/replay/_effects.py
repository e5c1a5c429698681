"""The effects of a replay: a model, MCP servers and an approver that answer from the log.

All are driven by the replay driver, from its own thread: a model call, a tool call or an
approval waits until the driver reaches the recorded event that answers it, so the program
advances only as fast as the log allows, and always in the recorded order.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Collection, Coroutine, Mapping
from typing import Any

from plait._errors import McpError, ModelError, ModelErrorKind, ReplayError
from plait.actors import ApprovalRequest, AttemptFailed, IdFor, ModelReply, ModelRequest, Promise
from plait.actors.mcp import CallResult, McpServerConfig, Report
from plait.events import (
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolsRefreshed,
    ToolApprovalDecided,
)
from plait.events.projections import ContentShape

__all__ = ["ReplayApprovals", "ReplayIds", "ReplayInstructions", "ReplayModel", "ReplayServers"]


class _ModelCall:
    """A model request waiting on the effect loop for the answer the driver gives from its
    thread."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_attempt_failed: Callable[[AttemptFailed], None],
    ) -> None:
        self.loop = loop
        """The effect loop, where the program hears of a failed attempt."""
        self.on_attempt_failed = on_attempt_failed
        self.answer: Promise[ModelReply] = Promise()
        """Settled with the recorded reply, or failed with the recorded error."""


class ReplayModel:
    """Stands in for ``ModelClient``: each ``complete`` waits for the driver's answer.

    Requests are numbered as the program makes them, when it makes them (before it records
    their ``ModelRequested``), so they are numbered as the log numbers its ``ModelRequested``
    events; the driver answers a request by its number. A request the program abandoned (an
    interrupt cancels it on the effect loop, a moment later, perhaps before it even started) is
    never mistaken for the one that follows it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[int, _ModelCall] = {}
        """The requests waiting for their answer, by number."""
        self._next = 0
        """The number the program's next request gets."""
        self._generation = 0
        """Bumped when the program is stopped: its requests still on their way are void."""
        self._requested = threading.Condition(self._lock)
        self.requests: list[ModelRequest] = []
        """What the program asked, in order."""

    content_shape: ContentShape | None = None
    """Always ``None``: a replay sends each request as the session's protocol encodes it."""

    def complete(
        self,
        request: ModelRequest,
        *,
        on_text: Callable[[str], None] = lambda _: None,
        on_attempt_failed: Callable[[AttemptFailed], None] = lambda _: None,
        on_reasoning: Callable[[str], None] = lambda _: None,
        on_sent: Callable[[], object] = lambda: None,
    ) -> Coroutine[Any, Any, ModelReply]:
        """Number the request now (it is sent, as far as the program can tell), and return
        what waits for the driver's answer to it."""
        with self._lock:
            self.requests.append(request)
            number, self._next = self._next, self._next + 1
            generation = self._generation
        on_sent()
        return self._answered(number, generation, on_text, on_attempt_failed)

    async def _answered(
        self,
        number: int,
        generation: int,
        on_text: Callable[[str], None],
        on_attempt_failed: Callable[[AttemptFailed], None],
    ) -> ModelReply:
        call = _ModelCall(asyncio.get_running_loop(), on_attempt_failed)
        with self._lock:
            if generation != self._generation:  # made by a program stopped since
                raise asyncio.CancelledError
            self._calls[number] = call
            self._requested.notify_all()
        try:
            reply = await call.answer
        finally:
            self._clear(number, call)
        if reply.text:  # as one delta, on the loop, before the reply is handed on
            on_text(reply.text)
        return reply

    async def aclose(self) -> None:
        """Nothing to close."""

    def pending(self, number: int, timeout: float) -> _ModelCall | None:
        """Return request ``number`` once it waits for its answer, waiting up to ``timeout``;
        ``None`` if it does not."""
        with self._lock:
            self._requested.wait_for(lambda: number in self._calls, timeout)
            return self._calls.get(number)

    def answer(self, number: int, reply: ModelReply, timeout: float) -> bool:
        """Answer call ``number`` with ``reply`` (its text as one delta); False if none."""
        call = self.pending(number, timeout)
        if call is None:
            return False
        self._clear(number, call)
        call.answer.settle(reply)
        return True

    def attempt_failed(self, number: int, failed: AttemptFailed, timeout: float) -> bool:
        """Tell call ``number`` one attempt failed (it goes on waiting); False if none."""
        call = self.pending(number, timeout)
        if call is None:
            return False
        call.loop.call_soon_threadsafe(call.on_attempt_failed, failed)
        return True

    def fail(
        self, number: int, error: str, timeout: float, kind: ModelErrorKind | None = None
    ) -> bool:
        """End call ``number`` with ``error`` (a ``ModelError`` of ``kind``, when the model
        failed so); False if there is none."""
        call = self.pending(number, timeout)
        if call is None:
            return False
        self._clear(number, call)
        # Its text is the recorded reason.
        failure = ReplayError(error) if kind is None else ModelError(error, kind=kind)
        call.answer.fail(failure)
        return True

    def abandon(self, next_number: int) -> None:
        """Forget every request of the program: its process stopped (a crash being replayed).
        The resumed program's next request is the log's request ``next_number``."""
        with self._lock:
            calls, self._calls = list(self._calls.values()), {}
            self._next = next_number
            self._generation += 1
        for call in calls:
            call.answer.cancel()

    def _clear(self, number: int, call: _ModelCall) -> None:
        with self._lock:
            if self._calls.get(number) is call:
                del self._calls[number]


class ReplayServers:
    """Stands in for ``McpServers``: lifecycle and call results come from the driver."""

    def __init__(self, configs: Mapping[str, McpServerConfig], report: Report) -> None:
        self._report = report
        self._lock = threading.Condition()
        self._status: dict[str, str] = {name: "starting" for name in configs}
        self._changed: dict[str, Promise[None]] = {}
        """Settled when the server's status changes, for whoever waits for it."""
        self._calls: dict[str, Promise[CallResult]] = {}

    async def start(self, lazy: Collection[str] = ()) -> None:
        """Nothing starts: the servers 'start' when the driver says so."""

    async def close(self) -> None:
        """Nothing runs."""

    def status(self, server: str) -> str:
        """Where ``server`` is, as far as the log has said."""
        return self._status.get(server, "failed")

    def inject(
        self, body: McpServerReady | McpServerFailed | McpToolsRefreshed | McpServersOffered
    ) -> None:
        """Report a recorded lifecycle fact, as the live servers did (or the servers a run
        offered, as its runtime recorded them before its pool started)."""
        if isinstance(body, McpServersOffered):
            self._report(body)
            return
        with self._lock:
            if isinstance(body, McpServerReady):
                self._status[body.server] = "ready"
            elif isinstance(body, McpServerFailed):
                failed = body.retry_in_sec is None
                self._status[body.server] = "failed" if failed else "restarting"
            changed = self._changed.pop(body.server, None)
        self._report(body)
        if changed is not None:
            changed.settle(None)

    async def wait_ready(self, server: str, timeout: float | None = None) -> None:
        """Wait until the log says ``server`` is ready (or failed: ``McpError``)."""
        async with asyncio.timeout(timeout):
            while True:
                with self._lock:  # the status and the wake-up, as ``inject`` changes them
                    status = self.status(server)
                    starting = status == "starting"
                    changed = self._changed.setdefault(server, Promise()) if starting else None
                if status == "failed":
                    raise McpError(f"MCP server {server!r} failed (as recorded)")
                if changed is None:  # ready, or restarting
                    return
                await changed

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str | Mapping[str, Any],
        timeout: float | None = None,
        *,
        call_id: str = "",
    ) -> CallResult:
        """Wait for the driver to answer call ``call_id`` with its recorded result."""
        pending: Promise[CallResult] = Promise()
        with self._lock:
            self._calls[call_id] = pending
            self._lock.notify_all()
        try:
            result = await pending
        finally:
            with self._lock:
                self._calls.pop(call_id, None)
        return result

    def answer(self, call_id: str, result: CallResult, timeout: float) -> bool:
        """Answer call ``call_id``; False when the program made no such call in time."""
        with self._lock:
            self._lock.wait_for(lambda: call_id in self._calls, timeout)
            pending = self._calls.pop(call_id, None)
        if pending is None:
            return False
        pending.settle(result)
        return True

    def calls(self) -> set[str]:
        """The call ids waiting for an answer."""
        with self._lock:
            return set(self._calls)


class ReplayApprovals:
    """Stands in for the ``ApprovalGate``: each decision is the recorded one, given by the
    driver when it reaches it (the approver is never called in a replay)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._asked: dict[str, Promise[ToolApprovalDecided]] = {}

    async def decide(self, request: ApprovalRequest) -> ToolApprovalDecided:
        """Wait for the driver to give the decision recorded for ``request.call_id``."""
        pending: Promise[ToolApprovalDecided] = Promise()
        with self._lock:
            self._asked[request.call_id] = pending
            self._lock.notify_all()
        try:
            decision = await pending
        finally:
            with self._lock:
                if self._asked.get(request.call_id) is pending:
                    del self._asked[request.call_id]
        return decision

    def answer(self, decision: ToolApprovalDecided, timeout: float) -> bool:
        """Give the recorded ``decision``; False when the program asked for none in time."""
        with self._lock:
            self._lock.wait_for(lambda: decision.call_id in self._asked, timeout)
            pending = self._asked.pop(decision.call_id, None)
        if pending is None:
            return False
        pending.settle(decision)
        return True


class ReplayIds:
    """Stands in for the runtime's ids: what a tool call makes gets the id the log gave it."""

    def __init__(self, made: Mapping[IdFor, str]) -> None:
        self._made = dict(made)

    def __call__(self, made_for: IdFor) -> str:
        # An id the log does not have: the program made something it did not. A new id lets it
        # go on to record that, which the comparison then reports.
        return self._made.get(made_for) or str(uuid.uuid4())


class ReplayInstructions:
    """Stands in for reading instruction files: a call reads what the log says it read.

    Where the log shows no outcome (the recorded process stopped while reading), the read
    waits, as it did, until the driver stops the program there (``abandon``).
    """

    def __init__(self, read: Mapping[IdFor, str | None]) -> None:
        self._read = dict(read)
        self._abandoned = threading.Event()

    def __call__(self, made_for: IdFor, name: str) -> str:
        text = self._read.get(made_for, f"!the log has no read of {name!r} for this call")
        if text is None:
            self._abandoned.wait()
            return f"!the read of {name!r} was cut off"
        return text

    def abandon(self) -> None:
        """Let a read that never finished in the log give up: its process stopped."""
        self._abandoned.set()
