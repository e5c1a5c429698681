"""What a live rerun answers from the log: the tool calls the original session made, and the
approval decisions it recorded for them (docs/replay.md#what-a-rerun-answers-from-the-log).

A call of the rerun is the original's when it names the same tool with the same arguments,
compared as canonical JSON (keys sorted, no spaces; arguments that are not JSON, as text). The
same call made twice is answered with the original's answers in their order, the last again
once they run out. A call the original never made is answered "not recorded", or, with
``live``, run by the rerun's servers for real.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from plait._jsonvalue import JsonValue
from plait.actors.mcp import CallResult
from plait.events import (
    Event,
    McpServerReady,
    McpToolsRefreshed,
    ToolApprovalDecided,
    ToolCallCompleted,
    ToolCallRequested,
)
from plait.events.projections import canonical_arguments

if TYPE_CHECKING:  # their modules bring asyncio, which `plait audit` and `fork` do without
    from plait.actors import ApprovalGate, ApprovalRequest, McpServersLike

__all__ = ["NOT_RECORDED", "CallKey", "LoggedApprovals", "LoggedServers", "RecordedCalls"]

NOT_RECORDED = "not recorded: the original session made no such call"
"""What the model is told of a call the original never made (without ``live``)."""

CallKey = tuple[str, str]
"""A call as a rerun matches it: the tool's fully-qualified name, its canonical arguments."""


def call_key(tool: str, arguments: str) -> CallKey:
    """The key of a call of ``tool`` with ``arguments`` (as the model sent them)."""
    return tool, canonical_arguments(arguments)


@dataclass
class RecordedCalls:
    """The original's tool calls by key, with their answers and approval decisions."""

    answers: dict[CallKey, deque[CallResult]] = field(default_factory=dict)
    decisions: dict[CallKey, deque[ToolApprovalDecided]] = field(default_factory=dict)
    names: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(server, its own tool name)`` -> the fully-qualified name, as the log listed them."""

    @classmethod
    def of(cls, events: Iterable[Event]) -> RecordedCalls:
        """Gather the calls of a session's ``events``."""
        found = cls()
        requested: dict[str, CallKey] = {}
        for event in events:
            body = event.body
            if isinstance(body, McpServerReady | McpToolsRefreshed):
                for snapshot in body.tools:
                    found.names[(body.server, snapshot.tool)] = snapshot.name
            elif isinstance(body, ToolCallRequested) and isinstance(body.arguments, str):
                requested[body.call_id] = call_key(body.tool, body.arguments)
            elif isinstance(body, ToolApprovalDecided) and body.call_id in requested:
                key = requested[body.call_id]
                found.decisions.setdefault(key, deque()).append(body)
            elif isinstance(body, ToolCallCompleted) and body.call_id in requested:
                key = requested.pop(body.call_id)
                if body.aborted_by is None and isinstance(body.output, str):
                    outcome = body.outcome if body.outcome in ("ok", "timeout") else "error"
                    result = CallResult(body.output, outcome, duration_ms=body.duration_ms)
                    found.answers.setdefault(key, deque()).append(result)
        return found

    def answer(self, key: CallKey) -> CallResult | None:
        """The original's next answer to ``key`` (its last, once they run out)."""
        return _next(self.answers.get(key))

    def decision(self, key: CallKey) -> ToolApprovalDecided | None:
        """The original's next decision on ``key``."""
        return _next(self.decisions.get(key))


T = TypeVar("T")


def _next(queue: deque[T] | None) -> T | None:
    if not queue:
        return None
    return queue.popleft() if len(queue) > 1 else queue[0]


class LoggedServers:
    """The rerun's MCP servers: started for real (their tools are the ones offered now), their
    calls answered from the log when the original made them."""

    def __init__(self, inner: McpServersLike, recorded: RecordedCalls, *, live: bool) -> None:
        self.inner = inner
        self.recorded = recorded
        self.live = live
        self.from_log: set[str] = set()
        """Call ids answered from the log."""
        self.not_recorded: set[str] = set()
        """Call ids the original never made (answered "not recorded", or run with ``live``)."""

    async def start(self, lazy: Collection[str] = ()) -> None:
        await self.inner.start(lazy)

    async def close(self) -> None:
        await self.inner.close()

    async def wait_ready(self, server: str, timeout: float | None = None) -> object:
        return await self.inner.wait_ready(server, timeout)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: str | Mapping[str, JsonValue],
        timeout: float | None = None,
        *,
        call_id: str = "",
    ) -> CallResult:
        """The original's answer to this call, else "not recorded" (or, ``live``, the
        server's)."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        name = self.recorded.names.get((server, tool), f"{server}__{tool}")
        answer = self.recorded.answer(call_key(name, text))
        if answer is not None:
            self.from_log.add(call_id)
            return answer
        self.not_recorded.add(call_id)
        if self.live:
            return await self.inner.call(server, tool, arguments, timeout, call_id=call_id)
        return CallResult(f"{NOT_RECORDED} ({name} with these arguments)", "error")


class LoggedApprovals:
    """The rerun's approvals: a call the original made gets the decision it got; another is
    approved (it is answered "not recorded"), or, ``live``, decided by the approver."""

    def __init__(self, recorded: RecordedCalls, gate: ApprovalGate | None) -> None:
        self.recorded = recorded
        self.gate = gate

    async def decide(self, request: ApprovalRequest) -> ToolApprovalDecided:
        key = call_key(request.tool, request.arguments)
        recorded = self.recorded.decision(key)
        if recorded is not None:
            return ToolApprovalDecided(
                request.call_id, recorded.approved, "log", reason=f"as recorded: {recorded.reason}"
            )
        if self.gate is not None:
            return await self.gate.decide(request)
        if key in self.recorded.answers:  # made, but never asked: nothing to repeat
            return ToolApprovalDecided(request.call_id, True, "log")
        return ToolApprovalDecided(request.call_id, True, "log", reason=NOT_RECORDED)
