"""Keep a conversation's history within bounds: trim it, or compact it in a turn of its own.

Before each turn's request the history is trimmed once it passes ``max_items`` or
``max_tokens`` (docs/conversations.md#history-bounds); then, if the task asks for it or the
prompt nears the context window, a compaction turn asks the model for a summary of the older
messages, which replaces them (docs/compaction.md). These functions decide and shape; the turn
records and sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import msgspec

from plait.actors._prompt import approx_tokens, encoded, transcript
from plait.actors.mcp import canonical_sha256
from plait.events import HistoryCompacted, ModelRequested
from plait.events.projections import safe_cut

if TYPE_CHECKING:
    from plait.actors._prompt import PromptView
    from plait.events import HistorySettings
    from plait.events.projections import ChatMessage, ContentShape

__all__ = ["COMPACT_INSTRUCTIONS", "compaction", "request", "sent_tokens", "summarised", "trimmed"]

COMPACT_INSTRUCTIONS = (
    "You are compacting a conversation so it can go on within the model's context window. "
    "Summarise the messages you are given for your own later use: the user's goals and "
    "constraints, what was decided and done, the tool results that still matter (names, "
    "values, paths), and what is still open. Be complete and concise; write only the summary."
)
"""The instructions of a compaction turn (used for that turn only, never the conversation's)."""


def trimmed(
    bounds: HistorySettings, prompt_view: PromptView, history: list[ChatMessage]
) -> HistoryCompacted | None:
    """The trim due before a turn, if the history is past ``max_items``/``max_tokens``: down to
    three quarters of the bound, so that trims come now and then, not every turn."""
    cut = 0
    if bounds.max_items is not None and len(prompt_view) > bounds.max_items:
        # Room for the note and the standing instructions.
        cut = len(prompt_view) - max(bounds.max_items * 3 // 4 - 2, 1)
    if bounds.max_tokens is not None and prompt_view.tokens() > bounds.max_tokens:
        cut = max(cut, prompt_view.first_within(bounds.max_tokens * 3 // 4))
    cut = safe_cut(history, cut)
    if cut == 0:
        return None
    limits = [f"{bounds.max_items} messages"] if bounds.max_items is not None else []
    if bounds.max_tokens is not None:
        limits.append(f"about {bounds.max_tokens} tokens")
    note = f"[{cut} earlier messages were removed: this history keeps {' and '.join(limits)}]"
    after = prompt_view.tokens(cut) + approx_tokens(len(note))
    return HistoryCompacted(note, cut, prompt_view.tokens(), after, trigger="bound")


def compaction(
    settings: HistorySettings,
    asked: int | None,
    prompt_tokens: int,
    prompt_view: PromptView,
    history: list[ChatMessage],
    standing: Sequence[ChatMessage | None],
) -> HistoryCompacted | Literal["nothing"] | None:
    """The compaction due before a turn, its summary still to come: asked for by the task
    (``asked``: the tokens to keep) or because the prompt (``prompt_tokens``) nears the context
    window. ``None`` when none is due; ``"nothing"`` when one was asked for and nothing is old
    enough to summarise but the last summary (``standing``: the instructions and summary the
    history opens with)."""
    manual = asked is not None
    keep = settings.keep_recent_tokens if asked is None else asked
    window = settings.context_window
    if not manual and (window is None or prompt_tokens <= settings.compact_threshold * window):
        return None
    # The latest turns stay as they are, and at least the task's own input.
    last_input = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), 0)
    kept_from = safe_cut(history, min(prompt_view.first_within(keep), last_input))
    if all(any(m is s for s in standing) for m in history[:kept_from]):
        return "nothing" if manual else None
    return HistoryCompacted("", kept_from, prompt_tokens, 0, trigger="manual" if manual else "auto")


def request(
    pending: HistoryCompacted,
    model: str,
    protocol: int,
    prompt_view: PromptView,
    history: list[ChatMessage],
    shape: ContentShape,
    wire_api: Literal["chat", "responses"] = "chat",
) -> tuple[msgspec.Raw, ModelRequested]:
    """The messages that ask for ``pending``'s summary, and the record of their request (sent
    in ``wire_api``: on the Responses API, the client makes them input items)."""
    kept_from = pending.kept_from
    if protocol >= 1:
        # The history as one text: servers differ on what they take of tool messages.
        text = {"role": "user", "content": transcript(history[:kept_from])}
        system = encoded({"role": "system", "content": COMPACT_INSTRUCTIONS})
        messages = msgspec.Raw(b"[%s,%s]" % (system, encoded(text)))
        sent, sha = 2, canonical_sha256(text)
    else:
        messages = prompt_view.messages(COMPACT_INSTRUCTIONS, kept_from, shape)
        sent, sha = kept_from + 1, prompt_view.prefix_sha256(kept_from)
    tools_sha, instructions_sha = canonical_sha256([]), canonical_sha256(COMPACT_INSTRUCTIONS)
    requested = ModelRequested(
        model, tools_sha, instructions_sha, sha, sent, purpose="compact", wire_api=wire_api
    )
    return messages, requested


def summarised(
    pending: HistoryCompacted, summary: str, prompt_view: PromptView
) -> HistoryCompacted | None:
    """``pending`` completed by the model's ``summary``; ``None`` if the summary is empty."""
    summary = summary.strip()
    if not summary:
        return None
    after = prompt_view.tokens(pending.kept_from) + approx_tokens(len(summary))
    return msgspec.structs.replace(pending, summary=summary, tokens_after=after)


def sent_tokens(pending: HistoryCompacted, prompt_view: PromptView) -> int:
    """The estimated prompt tokens of ``pending``'s request."""
    return prompt_view.tokens(0, pending.kept_from) + approx_tokens(len(COMPACT_INSTRUCTIONS))
