"""``ToolBatch``: one model reply's tool calls, run all at once if all are read-only, else in
order, each in its ``CallState``.

MCP calls go to the pool (their ends come back as ``ToolFinished``), after an approval if the
conversation's policy asks for one (``ApprovalFinished``); built-ins run in the session; an
interrupting built-in asks the turn to replace the task. Outputs are recorded in the model's
order even when calls run concurrently, so the log (and a replay of it) does not depend on
which call happened to finish first (docs/tools.md#running-calls). The batch tells the turn
that runs it how it went on (``Advanced``); the turn alone moves its own phase.
"""

from __future__ import annotations

import enum
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, NamedTuple, Protocol

import msgspec

from plait._machines import moved
from plait.actors import _builtins as builtins
from plait.actors._approvals import ApprovalRequest, refusal
from plait.actors._call_approvals import ask_gate
from plait.actors._messages import BuiltinCall, CallTool, CancelCalls, ToolResult
from plait.actors._turn_states import CALL_TRANSITIONS, CallState, Checkpoint
from plait.events import (
    Body,
    ContextChange,
    Event,
    McpToolSnapshot,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCall,
    ToolCallRequested,
    ToolPrefs,
)

if TYPE_CHECKING:
    from plait.actors._approvals import ConversationApprovals
    from plait.actors._deps import ConversationDeps
    from plait.actors._refs import Askable, Recipient
    from plait.actors._seams import McpPoolRef

__all__ = ["Advanced", "BatchHost", "CallParts", "CallSite", "ToolBatch", "arguments_of"]


class Advanced(enum.Enum):
    """How a batch went on, for the turn that runs it."""

    WAITING = "waiting"
    """A call runs, or waits for its approval: its message goes on."""
    ANSWERED = "answered"
    """Every call is answered and recorded: the turn loops."""
    STOPPED = "stopped"
    """A stop was asked and nothing of the batch runs: the task ends at this checkpoint."""
    REPLACED = "replaced"
    """An interrupting built-in replaced the task."""


class CallSite(NamedTuple):
    """Whose calls these are: the conversation, its task and turn, and its actor."""

    conversation_id: str
    task_id: str
    token: int
    me: Recipient


class CallParts(Protocol):
    """What runs a conversation's calls: its shared parts, its session, its approvals (the
    ``Conversation``, and the ``Turn`` that passes them on)."""

    @property
    def deps(self) -> ConversationDeps: ...

    @property
    def session(self) -> Askable: ...

    @property
    def approvals(self) -> ConversationApprovals: ...


class BatchHost(CallParts, Protocol):
    """What a batch needs of the turn that runs it (``Turn``)."""

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked: no call starts any more."""
        ...

    def record(self, *bodies: Body, ahead: bool = False) -> list[Event]: ...

    def replace(
        self, call: ToolCall, name: str, arguments: str, rest: list[ToolCall]
    ) -> ToolResult | None:
        """Replace the task (``name`` is ``conv_create`` or ``conv_send``); ``None`` once
        replaced, else the tool error that answers the call."""
        ...


class ToolBatch:
    """The tool calls of one model reply, being run."""

    def __init__(
        self,
        host: BatchHost,
        site: CallSite,
        calls: list[ToolCall],
        offered: dict[str, McpToolSnapshot],
        prefs: ToolPrefs,
    ) -> None:
        """``offered``: the turn's MCP tools by name; ``prefs``: which built-ins it offers."""
        self._host = host
        self._site = site
        self.calls = calls
        """In the model's order."""
        # A name the model made up, or of a tool outside this conversation's view (a built-in
        # whose switch is off), is None.
        self.names = [
            _name(c.name, offered, prefs.include_plan_tool, prefs.conversation_tools) for c in calls
        ]
        """Each call's canonical tool name; ``None``: no such tool here."""
        self._read_only = [
            name in builtins.READ_ONLY or (name in offered and offered[name].read_only)
            for name in self.names
        ]
        self.mcp = frozenset(name for name in self.names if name in offered)
        """The names that are MCP tools (run by the pool)."""
        self.parallel = all(self._read_only)
        """All read-only: start them all at once."""
        self._asks = host.approvals.reasons(self.names, offered)
        """Why each call waits for an approval decision before it runs (``None``: it does
        not)."""
        self.states = [CallState.WAITING] * len(calls)
        """Each call's state, in the model's order."""
        self._next = 0
        """The first call not recorded (those before it are)."""
        self._results: dict[int, ToolResult] = {}
        """Answered calls not yet recorded, by index."""
        self._deciding: dict[int, Future[ToolApprovalDecided]] = {}
        """Calls waiting for their decision, by index: its future (cancelled on an abort)."""
        self.control: ContextChange | None = None
        """The context change a call's result asked for, applied before the next turn (the
        last one asked for holds)."""

    @property
    def ahead(self) -> bool:
        """Whether its records may be written ahead: built-ins act only on the session, by
        events written after these (docs/event-log.md#writing-ahead); an MCP call acts
        outside, so what leads to it is durable first."""
        return not self.mcp

    def opening(self) -> list[Body]:
        """The calls as requested, and the starts of the MCP calls sent at once, their slots
        taken: recorded with the reply, they cost no commit of their own
        (docs/tools.md#running-calls). After a stop, no call starts."""
        requested: list[Body] = [
            ToolCallRequested(call.id, name or call.name, call.arguments, read_only=ro)
            for call, name, ro in zip(self.calls, self.names, self._read_only, strict=True)
        ]
        first = len(self.calls) if self.parallel else 1
        now = [i for i in range(first) if self.names[i] in self.mcp and self._asks[i] is None]
        if self._host.stopping or not now:
            return requested
        return [*requested, *self._pool.hold([self._request(i) for i in now])]

    def advance(self) -> Advanced:
        """Start what may start, record what was answered in the model's order."""
        while self._next < len(self.calls):
            index = self._next
            state = self.states[index]
            if state is CallState.ANSWERED:
                result = self._results.pop(index)
                self._host.record(result.completed(self.calls[index].id), ahead=self.ahead)
                self._move(index, "record")
                self._next += 1
                if result.control is not None:
                    self.control = result.control
            elif state is CallState.WAITING:
                if self._stopped():
                    return Advanced.STOPPED  # no call starts
                last = len(self.calls) if self.parallel else index + 1
                for later in range(index, last):
                    if self.states[later] is CallState.WAITING and self._start(later):
                        return Advanced.REPLACED
            else:
                # A call runs elsewhere, or waits for its approval: its ToolFinished (or
                # ApprovalFinished) goes on; after a stop, only a call that runs does.
                return Advanced.STOPPED if self._stopped() else Advanced.WAITING
        return Advanced.ANSWERED

    def finished(self, index: int, result: ToolResult) -> Advanced:
        """Call ``index`` ended on its server: hold its result, and go on."""
        self._answer(index, result)
        return self.advance()

    def decided(self, index: int, decision: ToolApprovalDecided) -> Advanced:
        """Record call ``index``'s decision, then send it to its server or answer it
        refused."""
        if self._deciding.pop(index, None) is None:
            return Advanced.WAITING  # decided already, or no longer waited for
        self._host.record(decision)
        if decision.approved:
            self._send(index)
            return Advanced.WAITING
        self._answer(index, _refused(refusal(decision)))
        return self.advance()

    def checkpoint(self) -> Checkpoint:
        """Where an interrupt finds the batch (docs/interrupts.md#checkpoints)."""
        unrecorded = self.states[self._next :]
        if CallState.RUNNING in unrecorded:
            return Checkpoint.CALL_RUNNING
        if self._next or CallState.ANSWERED in unrecorded:
            return Checkpoint.CALL_NOT_BEGUN
        return Checkpoint.REPLY_RECORDED

    def stop_deciding(self) -> None:
        """Cancel the calls that wait for their approval: they will not run."""
        for deciding in self._deciding.values():
            deciding.cancel()

    def cancel(self) -> None:
        """Cancel what the batch has out: decisions, and its calls on their servers."""
        self.stop_deciding()
        if self.mcp:
            self._pool.tell(CancelCalls(self._site.conversation_id, self._site.token))

    # --- one call ----------------------------------------------------------------------------

    def _stopped(self) -> bool:
        return self._host.stopping and self.checkpoint() is not Checkpoint.CALL_RUNNING

    def _move(self, index: int, transition: str) -> None:
        state = self.states[index]
        site, call_id = self._site, self.calls[index].id
        self.states[index] = moved(
            CALL_TRANSITIONS,
            transition,
            state,
            "call",
            lambda: f"conversation {site.conversation_id}, call {call_id}",
        )

    def _start(self, index: int) -> bool:
        """Run or start call ``index``; True when it replaced the task (conv_create/send)."""
        call, name = self.calls[index], self.names[index]
        arguments = arguments_of(call)
        if name is None:
            self._answer(index, _refused(f"unknown tool {call.name!r}: it is not offered here"))
        elif name in self.mcp:
            if self._asks[index] is None or self._approved(index, name, arguments):
                self._send(index)
        elif name == builtins.PLAN_TOOL:
            self._answer(index, self._update_plan(call.id, arguments))
        elif name in builtins.INTERRUPTING:
            outcome = self._host.replace(call, name, arguments, self.calls[index + 1 :])
            if outcome is None:
                return True
            self._answer(index, outcome)
        else:
            self._answer(index, self._builtin(name, arguments))
        return False

    def _answer(self, index: int, result: ToolResult) -> None:
        self._move(index, "answer")
        self._results[index] = result

    def _approved(self, index: int, name: str, arguments: str) -> bool:
        """Whether a remembered approval lets call ``index`` run now; if none does, record
        the request and ask the gate (docs/approvals.md#asking)."""
        host, call = self._host, self.calls[index]
        bodies, approved = host.approvals.check(call.id, name, arguments)
        if approved:
            host.record(*bodies)
            return True
        reason = self._asks[index] or ""
        events = host.record(*bodies, ToolApprovalRequested(call.id, name, reason))
        self._move(index, "ask")
        if not events:
            return False  # the session is being stopped: nothing more is recorded or run
        site = self._site
        request = ApprovalRequest(
            session_id=host.deps.journal.stream,
            conversation_id=site.conversation_id,
            task_id=site.task_id,
            call_id=call.id,
            tool=name,
            arguments=arguments,
            reason=reason,
            policy=host.approvals.policy,
            requested_at=events[-1].at,
        )
        self._deciding[index] = ask_gate(host.deps, request, site.me, site.token, index)
        return False

    def _send(self, index: int) -> None:
        """Send call ``index`` to its MCP server (``ToolFinished`` comes back)."""
        self._move(index, "send")
        self._pool.call(self._request(index))

    @property
    def _pool(self) -> McpPoolRef:
        pool = self._host.deps.pool
        assert pool is not None, "an MCP call in a session with no MCP servers"
        return pool

    def _request(self, index: int) -> CallTool:
        call, name, site = self.calls[index], self.names[index] or "", self._site
        return CallTool(
            site.conversation_id,
            site.task_id,
            call.id,
            site.token,
            index,
            name,
            arguments_of(call),
            site.me,
        )

    def _update_plan(self, call_id: str, arguments: str) -> ToolResult:
        """Record the plan the call sets (docs/tools.md#plan); a bad one changes nothing."""
        parsed = builtins.parse_arguments(builtins.PLAN_TOOL, arguments)
        if isinstance(parsed, str):
            return ToolResult(parsed, "error")
        assert isinstance(parsed, builtins.UpdatePlan)
        self._host.record(parsed.updated(call_id), ahead=self.ahead)
        return ToolResult("Plan updated", "ok")

    def _builtin(self, name: str, arguments: str) -> ToolResult:
        parsed = builtins.parse_arguments(name, arguments)
        if isinstance(parsed, str):
            return ToolResult(parsed, "error")
        started = time.monotonic()  # the duration enters the log as data
        call = BuiltinCall(self._site.conversation_id, name, parsed)
        result = self._host.session.ask(call, timeout=30)
        elapsed = (time.monotonic() - started) * 1000
        return ToolResult(msgspec.json.encode(result).decode(), "ok", elapsed)


def _name(
    name: str, offered: dict[str, McpToolSnapshot], plan: bool, conversations: bool
) -> str | None:
    """The canonical name of a call's tool, ``None`` if there is no such tool here."""
    builtin = builtins.canonical_name(name)
    if builtin is None:
        return name if name in offered else None
    return builtin if (plan if builtin == builtins.PLAN_TOOL else conversations) else None


def arguments_of(call: ToolCall) -> str:
    """The call's arguments as the model sent them (``{}`` if the log no longer has them)."""
    return call.arguments if isinstance(call.arguments, str) else "{}"


def _refused(why: str) -> ToolResult:
    return ToolResult(why, "refused")
