"""Token usage per conversation and per session, summed from ``TokensCounted``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from plait.events._types import Event, TokensCounted
from plait.events._values import Usage
from plait.events.projections._base import Projection

__all__ = ["TokenTotals", "TokensProjection", "add_usage"]


def add_usage(a: Usage, b: Usage) -> Usage:
    """Return the field-wise sum of two usages."""
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        total_tokens=a.total_tokens + b.total_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
    )


class TokenTotals(msgspec.Struct):
    """State of ``TokensProjection``."""

    by_conversation: dict[str, Usage] = {}
    """Summed usage per conversation id."""
    by_session: dict[str, Usage] = {}
    """Summed usage per session (stream)."""
    last_prompt_tokens: dict[str, int] = {}
    """The latest request's prompt tokens per conversation: how full its context is."""


class TokensProjection(Projection[TokenTotals]):
    """Sums token usage."""

    state_type = TokenTotals

    def initial(self) -> TokenTotals:
        return TokenTotals()

    def handlers(self) -> dict[type[Any], Callable[[TokenTotals, Event], None]]:
        return {TokensCounted: self._counted}

    @staticmethod
    def _counted(state: TokenTotals, event: Event) -> None:
        body = event.body
        assert isinstance(body, TokensCounted)
        zero = Usage()
        state.by_session[event.stream] = add_usage(
            state.by_session.get(event.stream, zero), body.usage
        )
        if event.conversation_id is not None:
            cid = event.conversation_id
            state.by_conversation[cid] = add_usage(state.by_conversation.get(cid, zero), body.usage)
            state.last_prompt_tokens[cid] = body.usage.prompt_tokens
