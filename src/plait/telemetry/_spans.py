"""A session's log as spans in the OpenTelemetry GenAI conventions (docs/telemetry.md).

``SpanBuilder`` folds one session's events, in order, into spans: one ``invoke_agent`` per task
run, one ``chat`` per model request, one ``execute_tool`` per tool call. It reads no clock and
makes no random id: a span's ids derive from the session's and the task's or call's ids, its
times are its events' ``at``, so building the spans of a log twice, or live and later, gives
the same spans. A span is handed out once it has ended; spans still open when the log ends
(a task running) are not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from plait.events import (
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelOptions,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    SessionStarted,
    StopRequested,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TokensCounted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    Usage,
)
from plait.telemetry import _genai as genai
from plait.telemetry._genai import Attributes
from plait.telemetry._prompts import Prompts
from plait.telemetry._span import Span, SpanEvent, span_id_of, trace_id_of

__all__ = ["SpanBuilder", "spans_of"]


@dataclass(slots=True)
class _Task:
    """A task seen enqueued: where it runs and, once it runs, its span."""

    plan: TaskPlan
    span: Span | None = None
    chat: Span | None = None  # its model request in flight


class SpanBuilder:
    """Fold one session's events into spans; ``feed`` returns the spans each event ended."""

    def __init__(self, stream: str, *, content: bool = False) -> None:
        """``content``: put messages, arguments and results on the spans (as the conventions'
        opt-in attributes); what a storage policy or ``forget`` removed is never among them."""
        self.stream = stream
        self.content = content
        self._model = ""
        self._options = ModelOptions()
        self._tasks: dict[str, _Task] = {}
        # What is open only: a session of a million tasks holds the few that run or wait.
        self._calls: dict[str, Span] = {}  # open tool calls by call id
        self._continues: dict[str, Span] = {}  # interrupting call id -> the run that made it
        self._targets: dict[str, Span] = {}  # task id -> the interrupting call it answers
        self._agents: dict[str, str] = {}  # conversation id -> agent name
        self._held: Span | None = None  # a chat span whose usage may follow it
        self._prompts = Prompts() if content else None

    def feed(self, event: Event) -> list[Span]:
        """Fold ``event``; return the spans it ended (or that ended before it), in end order."""
        ended: list[Span] = []
        body = event.body
        if self._held is not None and not isinstance(body, TokensCounted):
            ended.append(self._held)
            self._held = None
        if self._prompts is not None:
            self._prompts.apply(event)
        task = self._tasks.get(event.task_id) if event.task_id is not None else None
        if task is not None and task.span is not None:
            task.span.last_at = event.at
        match body:
            case SessionStarted():
                self._model = body.model
                if body.settings is not None:
                    self._options = body.settings.model
                self._name(body.root_conversation_id, "root")
            case ConversationOpened() if event.conversation_id is not None:
                self._name(event.conversation_id, event.conversation_id[:8])
            case TaskEnqueued():
                self._enqueued(body.plan)
            case TaskDropped() if event.task_id is not None:
                self._tasks.pop(event.task_id, None)
            case TaskStarted() if task is not None:
                self._started(task, event)
            case ModelRequested() if task is not None and task.span is not None:
                task.chat = self._request(task, task.span, event, body)
            case ModelRequestFailed() if task is not None and task.chat is not None:
                chat, task.chat = task.chat, None
                chat.fail(body.error, str(body.status) if body.status else "model_error")
                ended.append(self._end(chat, event.at))
            case ModelResponded() if task is not None and task.chat is not None:
                self._held, task.chat = self._responded(task.chat, body, event.at), None
            case TokensCounted() if self._held is not None and body.estimated:
                self._usage(self._held, body.usage, estimated=True)
            case ToolCallRequested() if task is not None and task.span is not None:
                self._call(task.span, event, body)
            case ToolApprovalRequested() if body.call_id in self._calls:
                attributes: Attributes = {"plait.approval.reason": body.reason}
                self._calls[body.call_id].events.append(
                    SpanEvent("plait.approval.requested", event.at, attributes)
                )
            case ToolApprovalDecided() if body.call_id in self._calls:
                self._decided(self._calls[body.call_id], event.at, body)
            case ToolCallStarted() if body.call_id in self._calls:
                self._calls[body.call_id].attributes[genai.PLAIT_MCP_SERVER] = body.server
            case ToolCallCompleted() if body.call_id in self._calls:
                ended.append(self._completed(self._calls.pop(body.call_id), event.at, body))
            case HistoryCompacted() if task is not None and task.span is not None:
                compacted: Attributes = {
                    "plait.compaction.trigger": body.trigger,
                    "plait.compaction.tokens_before": body.tokens_before,
                    "plait.compaction.tokens_after": body.tokens_after,
                }
                task.span.events.append(SpanEvent("plait.history.compacted", event.at, compacted))
            case StopRequested() if task is not None and task.span is not None:
                stop: Attributes = {"plait.stop.detail": body.detail}
                task.span.events.append(SpanEvent("plait.stop.requested", event.at, stop))
            case TaskCompleted() if task is not None and task.span is not None:
                ended += self._task_ended(task, task.span, event.at, body)
            case TurnAborted() if task is not None and task.span is not None:
                ended += self._aborted(task, task.span, event, body)
        return ended

    def finish(self) -> list[Span]:
        """Return the ended spans still held back (the log ends here, for now)."""
        held, self._held = self._held, None
        return [held] if held is not None else []

    # --- tasks -------------------------------------------------------------------------------

    def _name(self, conversation_id: str, name: str) -> None:
        self._agents.setdefault(conversation_id, name)

    def _enqueued(self, plan: TaskPlan) -> None:
        self._tasks.setdefault(plan.task_id, _Task(plan))
        closure = plan.closure
        if closure is not None and closure.target_task_id is not None:
            call = self._calls.get(closure.call_id)
            if call is not None:
                self._targets[closure.target_task_id] = call

    def _started(self, task: _Task, event: Event) -> None:
        plan, stream = task.plan, self.stream
        caller = self._caller(plan)
        if caller is not None:
            trace_id, parent_id = caller.trace_id, caller.span_id
        else:
            trace_id, parent_id = trace_id_of(stream, plan.task_id), None
        agent = self._agents.get(plan.conversation_id, plan.conversation_id[:8])
        attributes: Attributes = {
            genai.OPERATION: "invoke_agent",
            genai.PROVIDER: genai.PROVIDER_OPENAI,
            genai.AGENT_NAME: agent,
            genai.AGENT_ID: plan.conversation_id,
            genai.CONVERSATION_ID: plan.conversation_id,
            genai.SESSION_ID: stream,
            genai.PLAIT_TASK_ID: plan.task_id,
        }
        if self._model:
            attributes[genai.REQUEST_MODEL] = self._model
        if plan.closure is not None:
            attributes["plait.task.continues_call"] = plan.closure.call_id
        if plan.context is not None:
            attributes["plait.task.kind"] = "context_change"
        span = Span(
            f"invoke_agent {agent}",
            trace_id,
            span_id_of(stream, "task", plan.task_id),
            parent_id,
            "internal",
            event.at,
            attributes=attributes,
            last_at=event.at,
        )
        task.span = span

    def _caller(self, plan: TaskPlan) -> Span | None:
        """The span a task hangs under: the interrupting call it answers, or, for a
        continuation, the run of the task whose call it closes."""
        target = self._targets.pop(plan.task_id, None)
        if target is not None:
            return target
        if plan.closure is not None:
            return self._continues.pop(plan.closure.call_id, None)
        return None

    def _task_ended(self, task: _Task, span: Span, at: datetime, body: TaskCompleted) -> list[Span]:
        if body.cut_off is not None:
            span.fail(f"the reply was cut off ({body.cut_off})", body.cut_off)
        self._tasks.pop(task.plan.task_id, None)
        ended = self._close_calls(span, at, "the task ended")
        ended.append(self._end(span, at))
        return ended

    def _aborted(self, task: _Task, span: Span, event: Event, body: TurnAborted) -> list[Span]:
        at = event.at
        attributes: Attributes = {
            "plait.abort.reason": body.reason,
            "plait.abort.cause": body.cause,
            "plait.abort.checkpoint": body.checkpoint,
        }
        if body.detail:
            attributes["plait.abort.detail"] = body.detail
        if body.reason == "crashed":
            # The task was last seen at its last event before the crash; recovery came later.
            at = span.last_at if span.last_at is not None and span.last_at < at else at
            attributes["plait.recovered_at"] = event.at.isoformat()
        span.events.append(SpanEvent("plait.turn.aborted", at, attributes))
        if body.reason != "replaced":
            span.fail(f"{body.reason}: {body.detail}" if body.detail else body.reason, body.reason)
        ended: list[Span] = []
        if task.chat is not None:
            chat, task.chat = task.chat, None
            chat.fail(f"the request was cut off: {body.reason}", "cancelled")
            ended.append(self._end(chat, at))
        awaiting = frozenset(body.awaiting_call_ids)
        for call_id in awaiting:  # its continuation hangs under this run
            self._continues[call_id] = span
        self._tasks.pop(task.plan.task_id, None)
        ended += self._close_calls(span, at, f"aborted: {body.reason}", keep=awaiting)
        ended.append(self._end(span, at))
        return ended

    def _close_calls(
        self, task_span: Span, at: datetime, why: str, keep: frozenset[str] = frozenset()
    ) -> list[Span]:
        """End the task's calls still open (never answered), but those in ``keep``."""
        open_ids = [
            call_id
            for call_id, call in self._calls.items()
            if call.parent_id == task_span.span_id and call_id not in keep
        ]
        ended = []
        for call_id in open_ids:
            call = self._calls.pop(call_id)
            call.fail(why, "aborted")
            ended.append(self._end(call, at))
        return ended

    @staticmethod
    def _end(span: Span, at: datetime) -> Span:
        span.end = max(at, span.start)
        return span

    # --- model requests ---------------------------------------------------------------------

    def _request(self, task: _Task, parent: Span, event: Event, body: ModelRequested) -> Span:
        # Each attribute costs its encoding in every export (docs/telemetry.md#cost): what
        # the agent span says already (the session, the task) is not said again here.
        attributes: Attributes = {
            genai.OPERATION: "chat",
            genai.PROVIDER: genai.PROVIDER_OPENAI,
            genai.REQUEST_MODEL: body.model,
            genai.CONVERSATION_ID: task.plan.conversation_id,
        }
        if body.attempt > 1:
            attributes["plait.request.attempt"] = body.attempt
        if body.purpose != "turn":
            attributes["plait.request.purpose"] = body.purpose
        attributes.update(genai.request_options(self._options))
        if self._prompts is not None and event.conversation_id is not None:
            attributes.update(self._prompts.sent(event.conversation_id, task.plan))
        return Span(
            f"chat {body.model}",
            parent.trace_id,
            span_id_of(self.stream, "request", str(event.seq)),
            parent.span_id,
            "client",
            event.at,
            attributes=attributes,
        )

    def _responded(self, chat: Span, body: ModelResponded, at: datetime) -> Span:
        attributes = chat.attributes
        if body.response_id:
            attributes[genai.RESPONSE_ID] = body.response_id
        if body.response_model:
            attributes[genai.RESPONSE_MODEL] = body.response_model
        if body.finish_reason is not None:
            attributes[genai.FINISH_REASONS] = (body.finish_reason,)
        if body.cut_by is not None:
            attributes["plait.reply.cut_by"] = body.cut_by
        if body.usage is not None:
            self._usage(chat, body.usage, estimated=False)
        if self.content:
            attributes.update(genai.output_messages(body))
        return self._end(chat, at)

    @staticmethod
    def _usage(chat: Span, usage: Usage, *, estimated: bool) -> None:
        chat.attributes.update(genai.usage(usage))
        if estimated:
            chat.attributes["plait.usage.estimated"] = True

    # --- tool calls -------------------------------------------------------------------------

    def _call(self, parent: Span, event: Event, body: ToolCallRequested) -> None:
        attributes: Attributes = {
            genai.OPERATION: "execute_tool",
            genai.TOOL_NAME: body.tool,
            genai.TOOL_CALL_ID: body.call_id,
            genai.TOOL_TYPE: genai.tool_type(body.tool),
            genai.CONVERSATION_ID: event.conversation_id or "",
            "plait.tool.read_only": body.read_only,
        }
        if self.content:
            arguments = genai.text(body.arguments)
            if arguments is not None:
                attributes[genai.TOOL_ARGUMENTS] = arguments
        span = Span(
            f"execute_tool {body.tool}",
            parent.trace_id,
            span_id_of(self.stream, "call", str(event.seq)),
            parent.span_id,
            "internal",
            event.at,
            attributes=attributes,
        )
        self._calls[body.call_id] = span

    @staticmethod
    def _decided(call: Span, at: datetime, body: ToolApprovalDecided) -> None:
        attributes: Attributes = {
            "plait.approval.approved": body.approved,
            "plait.approval.decided_by": body.decided_by,
            "plait.approval.scope": body.scope,
        }
        if body.reason:
            attributes["plait.approval.reason"] = body.reason
        call.events.append(SpanEvent("plait.approval.decided", at, attributes))

    def _completed(self, call: Span, at: datetime, body: ToolCallCompleted) -> Span:
        call.attributes["plait.tool.outcome"] = body.outcome
        call.attributes["plait.tool.duration_ms"] = body.duration_ms
        if body.aborted_by is not None:
            call.attributes["plait.tool.aborted_by"] = body.aborted_by
        if body.outcome != "ok":  # the output is content: it says why only when content is on
            call.fail(f"the call ended {body.outcome}", body.outcome)
        if self.content:
            result = genai.text(body.output)
            if result is not None:
                call.attributes[genai.TOOL_RESULT] = result
        return self._end(call, at)


def spans_of(stream: str, events: Iterable[Event], *, content: bool = False) -> list[Span]:
    """Every span of a session's ``events`` that has ended, in end order."""
    builder = SpanBuilder(stream, content=content)
    spans = [span for event in events for span in builder.feed(event)]
    return spans + builder.finish()
