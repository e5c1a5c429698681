"""Count a conversation's prompt tokens: the model's figure where it gave one, estimated beyond.

The model reports the tokens of what it was sent and what it answered (``TokensCounted``); the
messages added after that request are estimated from their size (docs/compaction.md#when-it-runs).
Compaction compares the count with the context window.
"""

from __future__ import annotations

from plait.actors._prompt import PromptView
from plait.events import (
    Body,
    ConversationContextChanged,
    HistoryCompacted,
    ModelRequested,
    TokensCounted,
)

__all__ = ["TokenCount"]


class TokenCount:
    """What the model last counted of a conversation's history, folded from its events."""

    def __init__(self) -> None:
        self._reported: tuple[int, int] | None = None
        """(messages the last answered request sent, its prompt + completion tokens)."""
        self._sent = 0
        """History messages the last request sent (-1: it was a compaction's)."""

    def apply(self, body: Body) -> None:
        """Fold one event of the conversation."""
        if isinstance(body, ModelRequested):
            self._sent = body.message_count - 1 if body.purpose == "turn" else -1
        elif isinstance(body, TokensCounted) and self._sent >= 0:
            usage = body.usage
            self._reported = (self._sent, usage.prompt_tokens + usage.completion_tokens)
        elif isinstance(body, HistoryCompacted) or (
            isinstance(body, ConversationContextChanged) and body.clear_history
        ):
            self._reported = None  # the history it counted is gone

    def of(self, view: PromptView) -> int:
        """The tokens of the history ``view`` encodes (in sync with it): the model's count
        for what it was last sent, approximated for what came after."""
        if self._reported is None or self._reported[0] > len(view):
            return view.tokens()
        sent, tokens = self._reported
        return tokens + view.tokens(sent)
