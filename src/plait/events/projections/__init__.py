# Part of the events wing: projections, pure folds of the log.
# They import the event types and values of `plait.events`, never its stores.
"""Projections: pure folds of the event log into what people and the runtime read."""

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.events.projections._activity import Activity, ActivityProjection, prompt_text
    from plait.events.projections._approvals import (
        ApprovalsProjection,
        ApprovalState,
        canonical_arguments,
    )
    from plait.events.projections._audit import AuditLog, AuditProjection, AuditRow
    from plait.events.projections._base import Projection
    from plait.events.projections._contexts import CONTEXTS, Contexts, ContextsProjection
    from plait.events.projections._history import (
        ConversationHistory,
        ConversationInfo,
        Histories,
        HistoryProjection,
        conversation_index,
        rfc3339,
        safe_cut,
    )
    from plait.events.projections._messages import ChatMessage, ContentShape
    from plait.events.projections._plans import CurrentPlan, Plans, PlansProjection
    from plait.events.projections._stats import ConversationStats, SessionStats, StatsProjection
    from plait.events.projections._tasks import (
        TASKS,
        QueueSnapshot,
        TaskQueue,
        TaskQueueProjection,
        TaskResult,
        chain_to_drop,
        continuation_output,
        handoff_answer,
        next_task,
        task_queue,
    )
    from plait.events.projections._timeline import Timeline, TimelineEntry, TimelineProjection
    from plait.events.projections._tokens import TokensProjection, TokenTotals, add_usage

__all__ = [
    "CONTEXTS",
    "TASKS",
    "Activity",
    "ActivityProjection",
    "ApprovalState",
    "ApprovalsProjection",
    "AuditLog",
    "AuditProjection",
    "AuditRow",
    "ChatMessage",
    "ContentShape",
    "Contexts",
    "ContextsProjection",
    "ConversationHistory",
    "ConversationInfo",
    "ConversationStats",
    "CurrentPlan",
    "Histories",
    "HistoryProjection",
    "Plans",
    "PlansProjection",
    "Projection",
    "QueueSnapshot",
    "SessionStats",
    "StatsProjection",
    "TaskQueue",
    "TaskQueueProjection",
    "TaskResult",
    "Timeline",
    "TimelineEntry",
    "TimelineProjection",
    "TokenTotals",
    "TokensProjection",
    "add_usage",
    "canonical_arguments",
    "chain_to_drop",
    "continuation_output",
    "conversation_index",
    "handoff_answer",
    "next_task",
    "prompt_text",
    "rfc3339",
    "safe_cut",
    "task_queue",
]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.events.projections._activity": ("Activity", "ActivityProjection", "prompt_text"),
    "plait.events.projections._approvals": (
        "ApprovalState",
        "ApprovalsProjection",
        "canonical_arguments",
    ),
    "plait.events.projections._audit": ("AuditLog", "AuditProjection", "AuditRow"),
    "plait.events.projections._base": ("Projection",),
    "plait.events.projections._contexts": ("CONTEXTS", "Contexts", "ContextsProjection"),
    "plait.events.projections._history": (
        "ConversationHistory",
        "ConversationInfo",
        "Histories",
        "HistoryProjection",
        "conversation_index",
        "rfc3339",
        "safe_cut",
    ),
    "plait.events.projections._messages": ("ChatMessage", "ContentShape"),
    "plait.events.projections._plans": ("CurrentPlan", "Plans", "PlansProjection"),
    "plait.events.projections._stats": ("ConversationStats", "SessionStats", "StatsProjection"),
    "plait.events.projections._tasks": (
        "TASKS",
        "QueueSnapshot",
        "TaskQueue",
        "TaskQueueProjection",
        "TaskResult",
        "chain_to_drop",
        "continuation_output",
        "handoff_answer",
        "next_task",
        "task_queue",
    ),
    "plait.events.projections._timeline": ("Timeline", "TimelineEntry", "TimelineProjection"),
    "plait.events.projections._tokens": ("TokenTotals", "TokensProjection", "add_usage"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
