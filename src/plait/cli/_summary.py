"""``plait show --json``: a session's summary as one JSON object, in the words a user reads
elsewhere (``session_id``, ``conversation_id``), never the store's (``stream``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from plait.events import (
    Event,
    SessionClosed,
    SessionStarted,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    TurnAborted,
    Verification,
    as_text,
    last_done,
)
from plait.events.projections import (
    AuditProjection,
    HistoryProjection,
    PlansProjection,
    TokensProjection,
    rfc3339,
)

__all__ = ["session_summary"]


def session_summary(events: list[Event], report: Verification) -> dict[str, Any]:
    """Return what ``plait show --json`` prints for one session's events: id, model, start,
    state, conversations, tasks by outcome, tool calls, tokens, each conversation's current
    plan, and the hash chain's check."""
    session = report.stream
    first, last = events[0], events[-1]
    started = first.body if isinstance(first.body, SessionStarted) else None
    origin = started.forked_from if started is not None else None
    histories = HistoryProjection().fold(events)
    tasks = _task_outcomes(events)
    calls = AuditProjection().fold(events).rows
    usage = TokensProjection().fold(events).by_session.get(session)
    plans = PlansProjection().fold(events).by_conversation
    return {
        "session_id": session,
        "model": started.model if started is not None else "",
        "started_at": rfc3339(first.at),
        "state": "closed" if isinstance(last_done(events).body, SessionClosed) else "open",
        "events": last.seq,
        "root_conversation_id": started.root_conversation_id if started is not None else None,
        "forked_from": None
        if origin is None
        else {"session_id": origin.stream, "at_seq": origin.at_seq},
        "conversations": [
            {
                "conversation_id": conv.id,
                "parent_id": conv.parent_id,
                "created_at": rfc3339(conv.created_at),
                "message_count": len(conv.messages),
                "last_active_at": rfc3339(conv.last_active_at),
                "destroyed_at": None if conv.destroyed_at is None else rfc3339(conv.destroyed_at),
            }
            for conv in histories.conversations.values()
            if conv.stream == session
        ],
        "tasks": {"total": sum(tasks.values()), **tasks},
        "tool_calls": {
            "total": len(calls),
            **Counter(row.outcome for row in calls),
        },
        "tokens": msgspec.to_builtins(usage) if usage is not None else None,
        "plans": {
            cid: {
                "explanation": as_text(current.plan.explanation),
                "steps": [
                    {"step": as_text(step.step), "status": step.status}
                    for step in current.plan.steps
                ],
                "seq": current.seq,
                "updated_at": rfc3339(current.updated_at),
            }
            for cid, current in plans.items()
        },
        "chain": {
            "ok": report.ok,
            "events": report.events,
            "first_bad_seq": report.first_bad_seq,
            "reason": report.reason,
        },
    }


def _task_outcomes(events: list[Event]) -> dict[str, int]:
    """How many of the session's tasks ended each way: ``completed``, ``interrupted``,
    ``replaced``, ``crashed``, ``failed``, ``dropped``, or are ``running`` or ``waiting``."""
    state: dict[str, str] = {}
    for event in events:
        body, task = event.body, event.task_id
        if isinstance(body, TaskEnqueued):
            state[body.plan.task_id] = "waiting"
        elif task is None or task not in state:
            continue
        elif isinstance(body, TaskStarted):
            state[task] = "running"
        elif isinstance(body, TaskCompleted):
            state[task] = "completed"
        elif isinstance(body, TurnAborted):
            state[task] = body.reason
        elif isinstance(body, TaskDropped):
            state[task] = "dropped"
    return dict(Counter(state.values()))
