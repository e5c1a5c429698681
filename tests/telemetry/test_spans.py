"""Spans built from a recorded log (docs/telemetry.md#spans): approvals, refusals and the
determinism a backend's de-duplication relies on."""

from __future__ import annotations

from pathlib import Path

from scripted import call, local_mcp_servers, runtime_for

from plait import ApprovalDecision, ApprovalRequest
from plait.telemetry import spans_of
from plait.testing import ScriptedModelServer, Step


def test_approvals_are_events_of_their_call_and_a_denied_call_fails(tmp_path: Path) -> None:
    def approver(request: ApprovalRequest) -> ApprovalDecision:
        approved = request.tool == "t__echo"
        return ApprovalDecision(approved=approved, reason="" if approved else "not today")

    script = [
        Step(tool_calls=[call("t__echo", text="hi"), call("t__note", key="k", text="v")]),
        Step(text="done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server,
            tmp_path,
            mcp_servers=local_mcp_servers(),
            approval_policy="untrusted",
            approver=approver,
        ) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("go", timeout=60).last_assistant_message == "done"
        events = runtime.store.read(session.session_id)
    spans = spans_of(session.session_id, events)
    assert spans == spans_of(session.session_id, events)  # the same, built again
    by_name = {span.name: span for span in spans}
    echo, note = by_name["execute_tool t__echo"], by_name["execute_tool t__note"]
    assert [e.name for e in echo.events] == ["plait.approval.requested", "plait.approval.decided"]
    decided = echo.events[1].attributes
    assert (decided["plait.approval.approved"], decided["plait.approval.decided_by"]) == (
        True,
        "approver",
    )
    assert (echo.status, echo.attributes["plait.mcp.server"]) == ("unset", "t")
    assert echo.attributes["plait.tool.outcome"] == "ok"
    assert note.events[1].attributes["plait.approval.reason"] == "not today"
    assert (note.status, note.attributes["error.type"]) == ("error", "refused")
    assert "plait.mcp.server" not in note.attributes  # never sent
    task = by_name["invoke_agent root"]
    assert {echo.parent_id, note.parent_id} == {task.span_id}
    assert all(span.trace_id == task.trace_id for span in spans)
