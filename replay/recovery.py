"""Crash recovery: what a resumed session records for the task a crash cut off.

``Runtime.resume`` ends that task ``TurnAborted(crashed)``, after answering each tool call
the crash left open, so the conversation's history stays valid and the model is told what
is known: a call that may have run has an ``unknown`` outcome; one that never reached its
server did not run.
"""

from __future__ import annotations

from plait.actors.builtins import canonical_name
from plait.events.types import Event, ToolCallCompleted, ToolCallRequested, ToolCallStarted

__all__ = ["NOT_SENT", "UNKNOWN", "unanswered"]

NOT_SENT = "not run: the process stopped before this call was sent to its server"
UNKNOWN = (
    "result unknown: the process stopped while this call ran; it may or may not have "
    "taken effect, check before running it again"
)


def unanswered(past: list[Event], task_id: str) -> list[ToolCallCompleted]:
    """Answer the calls a crash left open in ``task_id``: unknown, unless never sent.

    A built-in may have run. An MCP call with no ``ToolCallStarted`` never reached its server
    (nor did a call of a tool that was not offered), so it did not run.
    """
    requested: dict[str, ToolCallRequested] = {}
    started: set[str] = set()
    for event in past:
        body = event.body
        if event.task_id != task_id:
            continue
        if isinstance(body, ToolCallRequested):
            requested[body.call_id] = body
        elif isinstance(body, ToolCallStarted):
            started.add(body.call_id)
        elif isinstance(body, ToolCallCompleted):
            requested.pop(body.call_id, None)
    return [
        ToolCallCompleted(call_id, UNKNOWN, "unknown")
        if call_id in started or canonical_name(body.tool) is not None
        else ToolCallCompleted(call_id, NOT_SENT, "error")
        for call_id, body in requested.items()
    ]
