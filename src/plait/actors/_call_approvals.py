"""Hand one MCP call's approval request to the gate, off the conversation's thread.

A call the conversation's policy asks about, and that no remembered approval covers, is
recorded as ``ToolApprovalRequested``; the runtime's ``ApprovalGate`` then decides on the
effect loop, and the decision comes back to the conversation as ``ApprovalFinished``, which
its turn records before the call runs or is refused. The policy, the keys and the gate
themselves are in ``approvals`` (docs/approvals.md#asking).
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pykka

from plait.actors._approvals import ApprovalGate, ApprovalRequest, denial
from plait.actors._messages import ApprovalFinished
from plait.events import ToolApprovalDecided

if TYPE_CHECKING:
    from plait.actors._deps import ConversationDeps
    from plait.actors._refs import Recipient

__all__ = ["ask_gate"]


def ask_gate(
    deps: ConversationDeps, request: ApprovalRequest, me: Recipient, token: int, index: int
) -> Future[ToolApprovalDecided]:
    """Ask the gate to decide ``request`` (call ``index`` of turn ``token``); ``me`` hears
    the decision as ``ApprovalFinished``. Cancelling the future drops it."""
    gate = deps.approval_gate or ApprovalGate(None)
    future = deps.effects.submit(gate.decide(request))

    def done(f: Future[ToolApprovalDecided]) -> None:
        if f.cancelled():
            return  # the turn was aborted
        error = f.exception()
        decision = f.result() if error is None else denial(request, "error", repr(error))
        with contextlib.suppress(pykka.ActorDeadError):  # the session closed meanwhile
            me.tell(ApprovalFinished(token, index, decision))

    future.add_done_callback(done)
    return future
