"""How bodies written by older plait versions are lifted to the current ones.

Each function lifts one type by one version, as a plain dict. Logs are never rewritten: these
run on every read of an old event. Older plait recorded why a task or a call was cut off only
as prose; the functions here are the one place that reads that prose, to derive the typed
``cause`` the current version records (docs/event-log.md#versions-and-upcasters). The strings
are what those versions wrote, frozen: they must not follow later changes of wording.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "STEPS",
    "upcast_task_dropped_v1",
    "upcast_tool_call_completed_v1",
    "upcast_turn_aborted_v1",
]

# What plait wrote before causes were recorded (version 1 of each body).
V1_DESTROYED = "conversation destroyed"
V1_FORCED_PREFIX = "force-aborted:"
V1_OWN_FAILURES = ("internal error:", "context change refused:", "compaction failed:")
V1_CRASH_ANSWERS = frozenset(
    {
        "not run: the process stopped before this call was sent to its server",
        "result unknown: the process stopped while this call ran; it may or may not have "
        "taken effect, check before running it again",
        "not run: it was waiting for its approval when the process stopped; denied",
        "not run: its approval was denied",
    }
)
V1_ABORTED = {"aborted: interrupted": "user", "aborted: replaced": "replaced"}


def upcast_turn_aborted_v1(body: dict[str, Any]) -> dict[str, Any]:
    """Derive the cause of an abort from its reason and, for interrupts and failures, its text."""
    reason, detail = body.get("reason"), str(body.get("detail", ""))
    if reason == "replaced":
        cause = "replaced"
    elif reason == "crashed":
        cause = "crash"
    elif reason == "failed":
        own = body.get("model_error") is None and detail.startswith(V1_OWN_FAILURES)
        cause = "error" if own else "model"
    elif detail == V1_DESTROYED:
        cause = "destroy"
    elif detail.startswith(V1_FORCED_PREFIX):
        cause = "forced_close"
    else:  # v1 recorded a close's interrupt as the user's: replay feeds it as one
        cause = "user"
    return {**body, "cause": cause}


def upcast_task_dropped_v1(body: dict[str, Any]) -> dict[str, Any]:
    """Derive what dropped a task from its reason's text."""
    cause = "destroy" if body.get("reason") == V1_DESTROYED else "user"
    return {**body, "cause": cause}


def upcast_tool_call_completed_v1(body: dict[str, Any]) -> dict[str, Any]:
    """Mark the answers plait wrote for calls it cut off, known by their text in v1."""
    output = body.get("output")
    if not isinstance(output, str):  # a blob reference: a tool's own output
        return body
    if output in V1_CRASH_ANSWERS:  # a forced close answered alike; replay tells them apart
        return {**body, "aborted_by": "crash"}
    if output in V1_ABORTED:
        return {**body, "aborted_by": V1_ABORTED[output]}
    return body


STEPS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("TurnAborted", 1): upcast_turn_aborted_v1,
    ("TaskDropped", 1): upcast_task_dropped_v1,
    ("ToolCallCompleted", 1): upcast_tool_call_completed_v1,
}
"""Every step: (type, version it lifts from) -> the function."""
