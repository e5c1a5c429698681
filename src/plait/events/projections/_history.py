"""Conversation histories as OpenAI chat messages (docs/conversations.md), and their index.

Per model response: one assistant message holding its text and all its ``tool_calls``, then one
``tool`` message per result. Invariant: every tool call is answered before the next model
request; a turn aborted with calls open answers them with ``aborted: <reason>`` unless a
continuation task will (``TurnAborted.awaiting_call_ids``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from plait.events._types import (
    CANCEL_MESSAGE,
    INTERRUPT_MESSAGE,
    INTERRUPT_TEXT,
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelRequested,
    ModelResponded,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    ToolCallCompleted,
    TurnAborted,
)
from plait.events._values import (
    Content,
    FunctionCallOutput,
    InputText,
    TaskPlan,
)
from plait.events.projections._base import Projection
from plait.events.projections._messages import ChatMessage, Part, shown_text

__all__ = [
    "ChatMessage",
    "ConversationHistory",
    "ConversationInfo",
    "Histories",
    "HistoryProjection",
    "conversation_index",
    "rfc3339",
    "safe_cut",
]


class ConversationHistory(msgspec.Struct):
    """One conversation: where it came from, its messages, the tool calls still open."""

    id: str
    """The conversation id."""
    stream: str
    """The session it lives in."""
    parent_id: str | None
    """The conversation that created it."""
    created_at: datetime
    """When it was opened."""
    last_active_at: datetime
    """Refreshed on every history write and on ``TaskCompleted`` (docs/conv-tools.md#conv_list)."""
    messages: list[ChatMessage] = []
    """The history, oldest first."""
    open_calls: list[str] = []
    """Tool call ids of the last assistant message not yet answered."""
    destroyed_at: datetime | None = None
    """When ``conv.destroy`` removed it; its history stays readable."""
    instructions: ChatMessage | None = None
    """The latest standing user-instructions message: a compaction keeps it."""
    summary: ChatMessage | None = None
    """The message of the latest compaction's summary, while the history holds it."""
    compacting: bool = False
    """A compaction request is out: its reply is a summary, not a history message."""
    kept_request: str = ""
    """The history hash of the request out, when the server keeps its response (``store``)."""


class Histories(msgspec.Struct):
    """State of ``HistoryProjection``."""

    conversations: dict[str, ConversationHistory] = {}
    """By conversation id, in opening order."""
    waiting: dict[str, TaskPlan] = {}
    """The plans of tasks enqueued and not yet started or dropped, by task id: a task's input
    joins the history when it starts. Not the session's queue: the scheduler reads the one its
    journal folds (``actors/_journal.py``)."""
    anomalies: list[str] = []
    """Events that broke a history invariant (the runtime must never produce them)."""


class HistoryProjection(Projection[Histories]):
    """Folds events into each conversation's chat history."""

    state_type = Histories

    def initial(self) -> Histories:
        return Histories()

    def handlers(self) -> dict[type[Any], Callable[[Histories, Event], None]]:
        return {
            ConversationOpened: self._opened,
            ConversationContextChanged: self._context_changed,
            ConversationDestroyed: self._destroyed,
            TaskEnqueued: self._enqueued,
            TaskDropped: self._dropped,
            TaskStarted: self._started,
            TaskCompleted: self._completed,
            ModelRequested: self._requested,
            ModelResponded: self._responded,
            ToolCallCompleted: self._tool_completed,
            TurnAborted: self._aborted,
            HistoryCompacted: self._compacted,
        }

    # The handlers of the events every turn writes (``_started``, ``_responded``,
    # ``_tool_completed``, ``_completed``) make their messages in one step: a rebuild folds
    # millions of them (bench/events.py, section 2).

    @staticmethod
    def _conversation(state: Histories, event: Event) -> ConversationHistory | None:
        cid = event.conversation_id
        conv = state.conversations.get(cid) if cid is not None else None
        if conv is None:
            state.anomalies.append(
                f"stream {event.stream} seq {event.seq}: {type(event.body).__name__} "
                f"for unknown conversation {cid}"
            )
        return conv

    @staticmethod
    def _write(conv: ConversationHistory, event: Event, message: ChatMessage) -> None:
        message.seq = event.seq
        conv.messages.append(message)
        conv.last_active_at = event.at

    def _opened(self, state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, ConversationOpened)
        if event.conversation_id is None:
            state.anomalies.append(f"stream {event.stream} seq {event.seq}: no conversation id")
            return
        conv = ConversationHistory(
            id=event.conversation_id,
            stream=event.stream,
            parent_id=body.parent_id,
            created_at=event.at,
            last_active_at=event.at,
        )
        state.conversations[conv.id] = conv
        if body.user_instructions is not None:
            self._instruct(conv, event, body.user_instructions)

    def _context_changed(self, state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, ConversationContextChanged)
        conv = self._conversation(state, event)
        if conv is None:
            return
        if body.clear_history:
            conv.messages = []
            conv.open_calls = []
            conv.instructions = conv.summary = None
            self._write(conv, event, ChatMessage("user", "[context rebuilt: history cleared]"))
        if "user_instructions" in body.changed and body.user_instructions is not None:
            self._instruct(conv, event, body.user_instructions)

    def _instruct(self, conv: ConversationHistory, event: Event, text: Content) -> None:
        conv.instructions = ChatMessage("user", text)
        self._write(conv, event, conv.instructions)

    def _destroyed(self, state: Histories, event: Event) -> None:
        conv = self._conversation(state, event)
        if conv is not None:
            conv.destroyed_at = event.at

    @staticmethod
    def _enqueued(state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, TaskEnqueued)
        state.waiting[body.plan.task_id] = body.plan

    @staticmethod
    def _dropped(state: Histories, event: Event) -> None:
        state.waiting.pop(event.task_id or "", None)

    def _started(self, state: Histories, event: Event) -> None:
        plan = state.waiting.pop(event.task_id or "", None)
        cid = event.conversation_id
        conv = state.conversations.get(cid) if cid is not None else None
        if conv is None:
            self._conversation(state, event)  # says it is unknown
            return
        if plan is None:
            return
        items = plan.input_items
        if len(items) == 1 and type(items[0]) is InputText:  # the usual task: one text
            conv.messages.append(ChatMessage("user", items[0].text, None, None, event.seq))
            conv.last_active_at = event.at
            return
        run: list[Part] = []
        for item in items:
            if isinstance(item, FunctionCallOutput):
                self._flush(conv, event, run)
                self._answer(state, conv, event, item.call_id, item.output)
            else:
                run.append(item)
        self._flush(conv, event, run)

    def _flush(self, conv: ConversationHistory, event: Event, run: list[Part]) -> None:
        if not run:
            return
        only = run[0]
        content: Content | list[Part] = (
            only.text if len(run) == 1 and isinstance(only, InputText) else list(run)
        )
        self._write(conv, event, ChatMessage("user", content))
        run.clear()

    def _answer(
        self,
        state: Histories,
        conv: ConversationHistory,
        event: Event,
        call_id: str,
        output: Content | list[Part],
    ) -> None:
        if call_id not in conv.open_calls:
            state.anomalies.append(
                f"stream {event.stream} seq {event.seq}: output for call {call_id}, "
                f"which is not open in conversation {conv.id}"
            )
            return
        conv.open_calls.remove(call_id)
        conv.messages.append(ChatMessage("tool", output, None, call_id, event.seq))
        conv.last_active_at = event.at

    def _completed(self, state: Histories, event: Event) -> None:
        cid = event.conversation_id
        conv = state.conversations.get(cid) if cid is not None else None
        if conv is not None:
            conv.last_active_at = event.at
        else:
            self._conversation(state, event)  # says it is unknown

    def _requested(self, state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, ModelRequested)
        conv = self._conversation(state, event)
        if conv is not None:
            conv.compacting = body.purpose == "compact"
            conv.kept_request = body.messages_sha256 if body.store else ""
        if conv is not None and conv.open_calls:
            state.anomalies.append(
                f"stream {event.stream} seq {event.seq}: model request with calls "
                f"{conv.open_calls} unanswered in conversation {conv.id}"
            )

    def _responded(self, state: Histories, event: Event) -> None:
        body: ModelResponded = event.body  # type: ignore[assignment]
        cid = event.conversation_id
        conv = state.conversations.get(cid) if cid is not None else None
        if conv is None:
            self._conversation(state, event)  # says it is unknown
            return
        if conv.compacting:
            return  # a summary: HistoryCompacted puts it in the history
        calls = body.tool_calls
        text: Content | None = body.text
        if calls:
            conv.open_calls = [call.id for call in calls]
            if text == "":
                text = None
        else:
            conv.open_calls = []
        reasoning = body.reasoning or None
        items = tuple(body.reasoning_items) or None
        kept = body.response_id if conv.kept_request else ""
        conv.messages.append(
            ChatMessage(
                "assistant",
                text,
                tuple(calls) or None,
                None,
                event.seq,
                reasoning,
                items,
                response_id=kept,
                sent_sha256=conv.kept_request if kept else "",
            )
        )
        conv.last_active_at = event.at

    def _tool_completed(self, state: Histories, event: Event) -> None:
        body: ToolCallCompleted = event.body  # type: ignore[assignment]
        cid = event.conversation_id
        conv = state.conversations.get(cid) if cid is not None else None
        if conv is None:
            self._conversation(state, event)  # says it is unknown
            return
        output: Content | list[Part] = body.output
        if body.images:  # kept as attachments: conv.history shows them
            output = [InputText(body.output), *body.images]
        call_id = body.call_id
        if call_id in conv.open_calls:
            conv.open_calls.remove(call_id)
            conv.messages.append(ChatMessage("tool", output, None, call_id, event.seq))
            conv.last_active_at = event.at
        else:
            self._answer(state, conv, event, call_id, output)  # says it is not open

    def _aborted(self, state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, TurnAborted)
        conv = self._conversation(state, event)
        if conv is None:
            return
        conv.compacting = False
        awaiting = set(body.awaiting_call_ids)
        output = CANCEL_MESSAGE if body.checkpoint in (1, 3, 4) else f"aborted: {body.reason}"
        for call_id in [c for c in conv.open_calls if c not in awaiting]:
            self._answer(state, conv, event, call_id, output)
        if body.checkpoint == 1:
            self._write(conv, event, ChatMessage("user", INTERRUPT_MESSAGE))
        elif body.checkpoint == 2 and conv.messages and conv.messages[-1].role == "tool":
            last = conv.messages[-1]
            content = last.content
            if isinstance(content, list):
                content = [*content, InputText(INTERRUPT_TEXT)]
            else:
                content = (
                    shown_text(content) + INTERRUPT_TEXT if content is not None else INTERRUPT_TEXT
                )
            # A new message in a new list: the recorded one stays as it was for anyone holding
            # it, and a view of the history (``PromptView``) sees that it changed.
            conv.messages = [*conv.messages[:-1], msgspec.structs.replace(last, content=content)]

    def _compacted(self, state: Histories, event: Event) -> None:
        body = event.body
        assert isinstance(body, HistoryCompacted)
        conv = self._conversation(state, event)
        if conv is None:
            return
        conv.compacting = False
        cut = safe_cut(conv.messages, body.kept_from, open_calls=bool(conv.open_calls))
        if cut == 0:
            return
        kept = conv.messages[cut:]
        # The standing user instructions outlive a compaction: they are not history to
        # summarise but the conversation's context (docs/conversations.md#instructions).
        conv.messages = []
        # Compared by value: a state saved and loaded again holds copies, not the same object.
        if conv.instructions is not None and conv.instructions not in kept:
            conv.messages.append(conv.instructions)
        conv.summary = ChatMessage("user", body.summary)
        self._write(conv, event, conv.summary)
        conv.messages.extend(kept)


def safe_cut(messages: list[ChatMessage], kept_from: int, *, open_calls: bool = False) -> int:
    """Move a compaction cut back so that no tool call is parted from its answers."""
    cut = max(0, min(kept_from, len(messages)))
    while 0 < cut < len(messages) and messages[cut].role == "tool":
        cut -= 1
    if open_calls:
        last_call = max(i for i, m in enumerate(messages) if m.tool_calls)
        cut = min(cut, last_call)
    return cut


class ConversationInfo(msgspec.Struct, frozen=True):
    """One row of ``conv.list`` (docs/conv-tools.md#conv_list)."""

    id: str
    """The conversation id."""
    parent_id: str | None
    """Who created it."""
    created_at: str
    """RFC 3339, UTC."""
    message_count: int
    """Messages in its history."""
    last_active_at: str
    """RFC 3339, UTC."""


def rfc3339(at: datetime) -> str:
    """Format ``at`` as RFC 3339 in UTC with a ``Z``."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def conversation_index(state: Histories, stream: str | None = None) -> list[ConversationInfo]:
    """List live conversations (of ``stream``, or all), in opening order."""
    return [
        ConversationInfo(
            id=conv.id,
            parent_id=conv.parent_id,
            created_at=rfc3339(conv.created_at),
            message_count=len(conv.messages),
            last_active_at=rfc3339(conv.last_active_at),
        )
        for conv in state.conversations.values()
        if conv.destroyed_at is None and (stream is None or conv.stream == stream)
    ]
