"""Projections: pure folds of the event log into what people and the runtime read."""

from plait.events.projections.activity import Activity, ActivityProjection, prompt_text
from plait.events.projections.approvals import ApprovalsProjection, ApprovalState
from plait.events.projections.audit import AuditLog, AuditProjection, AuditRow
from plait.events.projections.base import Projection
from plait.events.projections.contexts import Contexts, ContextsProjection
from plait.events.projections.history import (
    ChatMessage,
    ConversationHistory,
    ConversationInfo,
    Histories,
    HistoryProjection,
    conversation_index,
    rfc3339,
)
from plait.events.projections.plans import CurrentPlan, Plans, PlansProjection
from plait.events.projections.stats import ConversationStats, SessionStats, StatsProjection
from plait.events.projections.tasks import (
    QueueSnapshot,
    TaskQueue,
    TaskQueueProjection,
    TaskResult,
    task_queue,
)
from plait.events.projections.timeline import Timeline, TimelineEntry, TimelineProjection
from plait.events.projections.tokens import TokensProjection, TokenTotals, add_usage

__all__ = [
    "Activity",
    "ActivityProjection",
    "ApprovalState",
    "ApprovalsProjection",
    "AuditLog",
    "AuditProjection",
    "AuditRow",
    "ChatMessage",
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
    "conversation_index",
    "prompt_text",
    "rfc3339",
    "task_queue",
]
