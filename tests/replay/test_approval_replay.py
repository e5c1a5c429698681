"""A session with approvals replays exactly: the approver's decisions and its timeouts are fed
from the log (no approver is called), the ones by a remembered key the program makes again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
from scripted import assert_histories_valid, call, local_mcp_servers, record_session

from plait import ApprovalDecision, ApprovalRequest
from plait.events import (
    NewEvent,
    SessionStarted,
    SqliteStore,
    TaskCompleted,
    ToolApprovalDecided,
    ToolCallCompleted,
)
from plait.replay import replay
from plait.testing import Step


async def approver(request: ApprovalRequest) -> ApprovalDecision:
    if "stall" in request.arguments:
        await asyncio.Event().wait()  # never decides: the timeout does
    if "deny" in request.arguments:
        return ApprovalDecision(approved=False, reason="not today", decided_by="alice")
    return ApprovalDecision(approved=True, scope="session", args_pattern='{"key":"a*"*')


APPROVING: dict[str, Any] = {
    "mcp_servers": local_mcp_servers(),
    "approval_policy": "on-write",
    "approver": approver,
}
"""The runtime of these sessions: the test MCP server, and the approver above asked on writes."""


def test_a_session_with_approvals_replays_without_its_approver(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("t__note", key="a1", text="x")]),  # approved, remembered
        Step(tool_calls=[call("t__note", key="a2", text="y"), call("t__echo", text="e")]),
        Step(tool_calls=[call("t__note", key="deny", text="z")]),  # denied
        Step(tool_calls=[call("t__note", key="stall", text="w")]),  # timed out
        Step(text="done"),
        Step(tool_calls=[call("t__fail", message="a"), call("t__note", key="a3", text="v")]),
        Step(text="again"),
    ]
    with SqliteStore(tmp_path / "plait.db") as store:
        session_id = record_session(
            store,
            script,
            ["write", "more"],
            "id",
            {"model": "m"},
            **APPROVING,
            approval_timeout_sec=0.5,
        )
        events = store.read(session_id)
        result = replay(store, session_id, timeout=10)
    assert sum(isinstance(e.body, TaskCompleted) for e in events) == 2  # both tasks ran
    assert result.ok, result.divergence and result.divergence.message()
    assert result.events == result.total == len(events)
    decided = [e.body for e in events if isinstance(e.body, ToolApprovalDecided)]
    assert [(d.approved, d.decided_by) for d in decided] == [
        (True, "approver"),
        (True, "key"),
        (False, "alice"),
        (False, "timeout"),
        (True, "approver"),  # t__fail: not covered by the key for t__note
        (True, "key"),
    ]
    outcomes = [e.body.outcome for e in events if isinstance(e.body, ToolCallCompleted)]
    assert outcomes == ["ok", "ok", "ok", "refused", "refused", "error", "ok"]
    assert_histories_valid(events)


def test_a_changed_decision_is_a_divergence(tmp_path: Path) -> None:
    """A program that no longer asks (its policy widened in the log's place) is caught."""
    script = [Step(tool_calls=[call("t__note", key="a1", text="x")]), Step(text="done")]
    with SqliteStore(tmp_path / "plait.db") as store:
        session_id = record_session(store, script, ["write"], "id", {"model": "m"}, **APPROVING)
        # The same log, but as if the session had started with policy "never".
        events = store.read(session_id)
        assert isinstance(events[-2].body, TaskCompleted)  # it ran, then it was closed
        started = events[0].body
        assert isinstance(started, SessionStarted)
        widened = msgspec.structs.replace(started, approval_policy="never")
        copy = [NewEvent(widened, at=events[0].at)]
        copy += [NewEvent(e.body, e.conversation_id, e.task_id, at=e.at) for e in events[1:]]
        store.append("copy", copy, 0)
        result = replay(store, "copy", timeout=5)
    assert result.divergence is not None
    assert "ToolApprovalRequested" in result.divergence.expected
    assert "ToolCallStarted" in result.divergence.got
