"""What ``plait mcp-server`` tells the client while a task runs: the live transcript, as MCP
progress or log notifications, and each approval the task needs, as an elicitation request
(docs/mcp-server.md#while-a-task-runs).

A task's events come from the session's feed (``SessionHandle.subscribe``), read on the MCP
server's event loop. Approvals are asked on the runtime's effect loop: ``ClientApprover`` hands
each one to the loop of the client call that waits on the session, and waits for its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning

from plait.actors import ApprovalDecision, ApprovalRequest
from plait.cli._live import LivePrinter
from plait.events import Event, FeedLagged, InputItem, Transient
from plait.runtime import Follower, SessionHandle, TaskOutcome

__all__ = ["APPROVAL_SCHEMA", "Caller", "ClientApprover", "follow_task"]

Ctx = Context[Any, Any]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scope": {
            "type": "string",
            "title": "Approve for",
            "description": "once: this call only; conversation or session: later calls of "
            "this tool there run without asking",
            "enum": ["once", "conversation", "session"],
            "default": "once",
        }
    },
}
"""What an approval asks the client for: accept runs the call (for the scope chosen), decline
or cancel denies it."""


class Caller:
    """A client's ``run`` or ``reply`` call waiting on a session's task: where its
    notifications and elicitation requests go."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.loop = asyncio.get_running_loop()
        capabilities = ctx.session.client_capabilities
        self.can_elicit = capabilities is not None and capabilities.elicitation is not None
        """Whether the client declared the elicitation capability."""
        params = ctx.session.client_params
        self.name = f"client:{params.client_info.name}" if params is not None else "client"
        """Who decides, as ``ToolApprovalDecided.decided_by`` records it."""

    async def ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """Put ``request`` to the client as an elicitation; accept approves, anything else
        denies."""
        where = f"session {request.session_id}, conversation {request.conversation_id}"
        message = (
            f"Allow {request.tool} {request.arguments}?\n"
            f"plait asks because {request.reason} ({where})."
        )
        result = await self.ctx.session.elicit_form(
            message, APPROVAL_SCHEMA, related_request_id=self.ctx.request_id
        )
        if result.action != "accept":
            return ApprovalDecision(
                approved=False, reason=f"the client answered {result.action}", decided_by=self.name
            )
        scope = (result.content or {}).get("scope", "once")
        if scope not in ("once", "conversation", "session"):
            return ApprovalDecision(
                approved=False,
                reason=f"the client answered scope {scope!r}, not once, conversation or session",
                decided_by=self.name,
            )
        return ApprovalDecision(approved=True, scope=scope, decided_by=self.name)

    async def tell(self, progress: int, text: str) -> None:
        """Send one piece of the transcript: as progress if the client asked for it, else as a
        log message."""
        meta = self.ctx.request_context.meta or {}
        if meta.get("progress_token") is not None:
            await self.ctx.report_progress(progress, None, text)
            return
        with warnings.catch_warnings():  # deprecated from protocol 2026-07-28, current before
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.ctx.session.send_log_message(
                "info", text, logger="plait", related_request_id=self.ctx.request_id
            )


class ClientApprover:
    """The runtime's approver: asks the client whose call waits on the request's session
    (the earliest, if several do), and denies when none can be asked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callers: dict[str, list[Caller]] = {}

    @contextlib.contextmanager
    def waiting(self, session_id: str, caller: Caller) -> Iterator[None]:
        """Have ``caller`` asked for the session's approvals while the block runs."""
        with self._lock:
            self._callers.setdefault(session_id, []).append(caller)
        try:
            yield
        finally:
            with self._lock:
                callers = self._callers[session_id]
                callers.remove(caller)
                if not callers:
                    del self._callers[session_id]

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Decide ``request`` (on the runtime's effect loop)."""
        with self._lock:
            callers = self._callers.get(request.session_id, [])
            caller = callers[0] if callers else None
        if caller is None:
            why = "no MCP client waits on the session's task to be asked"
            return ApprovalDecision(approved=False, reason=why, decided_by="mcp-server")
        if not caller.can_elicit:
            why = "the MCP client did not declare the elicitation capability: nobody to ask"
            return ApprovalDecision(approved=False, reason=why, decided_by="mcp-server")
        asked = asyncio.run_coroutine_threadsafe(caller.ask(request), caller.loop)
        # Cancelled (the turn was aborted, or the approval timed out): so is the question.
        return await asyncio.wrap_future(asked)


async def follow_task(
    handle: SessionHandle,
    caller: Caller,
    prompt: str | Sequence[InputItem],
    conversation_id: str | None = None,
) -> TaskOutcome:
    """Submit a task, tell ``caller`` what it says and does as it runs, and return how it and
    its continuations ended (an interrupt, if the client cancels its call)."""
    printer = _Transcript(handle.root_conversation_id, caller)
    with handle.subscribe() as feed:  # before the submit: nothing of the task is missed
        task_id = await handle.asubmit(prompt, conversation_id=conversation_id)
        follower = Follower(task_id)
        try:
            while (item := await feed.aget()) is not None:
                if isinstance(item, FeedLagged):  # what did not fit, from the log
                    items: list[Event | Transient] = [
                        *await anyio.to_thread.run_sync(feed.catch_up, item)
                    ]
                else:
                    items = [item]
                for each in items:
                    await printer(each)
                    if (ended := follower.see(each)) is not None:
                        return ended
        except BaseException:
            handle.interrupt()  # nobody waits for its answer any more
            raise
    cid = follower.conversation or conversation_id or handle.root_conversation_id
    return TaskOutcome(task_id, cid, "interrupted", detail="the session was closed")


class _Transcript:
    """What ``plait chat`` prints of a session (``LivePrinter``), sent piece by piece."""

    def __init__(self, root: str, caller: Caller) -> None:
        self._text = io.StringIO()
        self._printer = LivePrinter(root, self._text)
        self._caller = caller
        self._sent = 0

    async def __call__(self, item: Event | Transient) -> None:
        self._printer(item)
        text = self._text.getvalue()
        if text:
            self._text.seek(0)
            self._text.truncate()
            self._sent += 1
            await self._caller.tell(self._sent, text)
