"""Each conversation's context as it is now: the one it opened with, each change applied
(docs/conversations.md#conversation-context). The session reads it for what a new conversation
inherits; each conversation, for its own instructions, tool view and switches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from plait.events._types import ConversationContextChanged, ConversationOpened, Event
from plait.events.projections._base import Projection

__all__ = ["CONTEXTS", "Contexts", "ContextsProjection"]


class Contexts(msgspec.Struct):
    """State of ``ContextsProjection``."""

    by_conversation: dict[str, ConversationOpened] = {}
    """Each conversation's context, by its id (destroyed ones included)."""


class ContextsProjection(Projection[Contexts]):
    """Folds events into each conversation's current context."""

    state_type = Contexts

    def initial(self) -> Contexts:
        return Contexts()

    def handlers(self) -> dict[type[Any], Callable[[Contexts, Event], None]]:
        return {ConversationOpened: _opened, ConversationContextChanged: _changed}


def _opened(state: Contexts, event: Event) -> None:
    assert isinstance(event.body, ConversationOpened)
    if event.conversation_id:
        state.by_conversation[event.conversation_id] = event.body


def _changed(state: Contexts, event: Event) -> None:
    body = event.body
    assert isinstance(body, ConversationContextChanged)
    context = state.by_conversation.get(event.conversation_id or "")
    if context is not None and event.conversation_id:
        state.by_conversation[event.conversation_id] = body.applied(context)


CONTEXTS = ContextsProjection()
