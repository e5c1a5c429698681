"""What each model request sent, for spans that carry content: the conversation's history as
the history projection folds it, and its base instructions as the log recorded them."""

from __future__ import annotations

from plait.events import ConversationContextChanged, ConversationOpened, Event, TaskPlan
from plait.events.projections import HistoryProjection
from plait.telemetry import _genai as genai
from plait.telemetry._genai import Attributes

__all__ = ["Prompts"]


class Prompts:
    """Fold a session's histories, to say what a request sent."""

    def __init__(self) -> None:
        self._history = HistoryProjection()
        self._state = self._history.initial()
        self._instructions: dict[str, str | None] = {}

    def apply(self, event: Event) -> None:
        """Fold ``event``."""
        self._history.apply(self._state, event)
        body, cid = event.body, event.conversation_id
        if cid is None:
            return
        if isinstance(body, ConversationContextChanged) and "base_instructions" not in body.changed:
            return
        if isinstance(body, ConversationOpened | ConversationContextChanged):
            self._instructions[cid] = genai.text(body.base_instructions or "") or None

    def sent(self, conversation_id: str, plan: TaskPlan) -> Attributes:
        """The content attributes of the request the conversation is about to send."""
        conv = self._state.conversations.get(conversation_id)
        if conv is None:
            return {}
        override = plan.base_instructions_override
        instructions = (
            genai.text(override) if override is not None else self._instructions.get(conv.id)
        )
        return genai.input_messages(conv.messages, instructions)
