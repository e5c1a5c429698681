"""Ask for the approval of one MCP call of a tool batch, before it runs.

A call the conversation's policy asks about runs at once if a remembered approval (a
``CommandKey``) covers it. Otherwise ``ToolApprovalRequested`` is recorded and the runtime's
``ApprovalGate`` decides on the effect loop, off the conversation's thread; the decision comes
back as ``ApprovalFinished``, which ``tool_batch.on_decision`` records. The policy, the keys
and the gate themselves are in ``approvals`` (docs/approvals.md#asking).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pykka

from plait.actors.approvals import ApprovalGate, ApprovalRequest, denial
from plait.actors.messages import ApprovalFinished
from plait.events.types import ToolApprovalDecided, ToolApprovalRequested

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation
    from plait.actors.tool_batch import ToolBatch

__all__ = ["ask"]


def ask(conv: Conversation, batch: ToolBatch, index: int, name: str, arguments: str) -> bool:
    """Whether a remembered approval lets call ``index`` run now; if none does, record the
    request and ask the gate, off this thread (``ApprovalFinished`` goes on)."""
    assert conv.run is not None
    run, call = conv.run, batch.calls[index]
    bodies, approved = conv.approvals.check(call.id, name, arguments)
    reason = batch.asks[index] or ""
    if approved:
        conv.record(*bodies)
        return True
    events = conv.record(*bodies, ToolApprovalRequested(call.id, name, reason))
    if not events:
        return False  # the session is being stopped: nothing more is recorded or run
    request = ApprovalRequest(
        session_id=conv.deps.journal.stream,
        conversation_id=conv.id,
        task_id=run.plan.task_id,
        call_id=call.id,
        tool=name,
        arguments=arguments,
        reason=reason,
        policy=conv.approvals.policy,
        requested_at=events[-1].at,
    )
    me, token = conv.actor_ref, run.token
    gate = conv.deps.approval_gate or ApprovalGate(None)
    future = conv.deps.effects.submit(gate.decide(request))
    batch.awaiting[index] = future

    def done(f: Future[ToolApprovalDecided]) -> None:
        if f.cancelled():
            return  # the turn was aborted
        error = f.exception()
        decision = f.result() if error is None else denial(request, "error", repr(error))
        with contextlib.suppress(pykka.ActorDeadError):  # the session closed meanwhile
            me.tell(ApprovalFinished(token, index, decision))

    future.add_done_callback(done)
    return False
