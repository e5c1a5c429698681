"""Keep a conversation's history within bounds: trim it, or compact it in a turn of its own.

Before each turn's request the history is trimmed once it passes ``max_items`` or
``max_tokens`` (docs/conversations.md#history-bounds); then, if the task asks for it or the
prompt nears the context window, a compaction turn asks the model for a summary of the older
messages, which replaces them (docs/compaction.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from plait.actors import interrupts
from plait.actors.mcp.names import canonical_sha256
from plait.actors.prompt import approx_tokens, encoded, transcript
from plait.events.projections.history import safe_cut
from plait.events.types import Body, HistoryCompacted, ModelRequested, TaskCompleted, TurnStarted

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation
    from plait.actors.stream import ModelReply

__all__ = ["COMPACT_INSTRUCTIONS", "finish", "start", "trim"]

COMPACT_INSTRUCTIONS = (
    "You are compacting a conversation so it can go on within the model's context window. "
    "Summarise the messages you are given for your own later use: the user's goals and "
    "constraints, what was decided and done, the tool results that still matter (names, "
    "values, paths), and what is still open. Be complete and concise; write only the summary."
)
"""The instructions of a compaction turn (used for that turn only, never the conversation's)."""


def trim(conv: Conversation) -> None:
    """Remove the oldest messages once past ``max_items``/``max_tokens``, down to three
    quarters of the bound, so that trims come now and then, not every turn."""
    bounds, prompt_view = conv.deps.history, conv.prompt_view
    cut = 0
    if bounds.max_items is not None and len(prompt_view) > bounds.max_items:
        # Room for the note and the standing instructions.
        cut = len(prompt_view) - max(bounds.max_items * 3 // 4 - 2, 1)
    if bounds.max_tokens is not None and prompt_view.tokens() > bounds.max_tokens:
        cut = max(cut, prompt_view.first_within(bounds.max_tokens * 3 // 4))
    cut = safe_cut(conv.history(), cut)
    if cut == 0:
        return
    limits = [f"{bounds.max_items} messages"] if bounds.max_items is not None else []
    if bounds.max_tokens is not None:
        limits.append(f"about {bounds.max_tokens} tokens")
    note = f"[{cut} earlier messages were removed: this history keeps {' and '.join(limits)}]"
    after = prompt_view.tokens(cut) + approx_tokens(len(note))
    conv.record(HistoryCompacted(note, cut, prompt_view.tokens(), after, trigger="bound"))
    conv.synced()


def start(conv: Conversation) -> bool:
    """Start a compaction turn if it is asked for or the prompt nears the context window;
    True when one went out (or a manual one found nothing to do and ended the task)."""
    assert conv.run is not None
    run, settings = conv.run, conv.deps.history
    manual = run.plan.compact is not None
    keep = settings.keep_recent_tokens if run.plan.compact is None else run.plan.compact
    window = settings.context_window
    if not manual:
        if run.compacted or window is None:
            return False
        if conv.prompt_tokens() <= settings.compact_threshold * window:
            return False
    prompt_view, history = conv.prompt_view, conv.history()
    # The latest turns stay as they are, and at least the task's own input.
    last_input = next((i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), 0)
    kept_from = safe_cut(history, min(prompt_view.first_within(keep), last_input))
    own = conv.histories.conversations[conv.id]
    standing = (own.instructions, own.summary)
    if all(any(m is s for s in standing) for m in history[:kept_from]):
        if manual:  # nothing old enough to summarise but the last summary
            conv.record(TaskCompleted())
            conv.end()
            return True
        return False
    before = conv.prompt_tokens()
    run.compacting = HistoryCompacted(
        "", kept_from, before, 0, trigger="manual" if manual else "auto"
    )
    shape = conv.deps.model_client.content_shape or prompt_view.empty
    if conv.deps.model_protocol >= 1:
        # The history as one text: servers differ on what they take of tool messages.
        text = {"role": "user", "content": transcript(history[:kept_from])}
        system = encoded({"role": "system", "content": COMPACT_INSTRUCTIONS})
        messages = msgspec.Raw(b"[%s,%s]" % (system, encoded(text)))
        sent, sha = 2, canonical_sha256(text)
    else:
        messages = prompt_view.messages(COMPACT_INSTRUCTIONS, kept_from, shape)
        sent, sha = kept_from + 1, prompt_view.prefix_sha256(kept_from)
    deltas = conv.request(messages, [], shape)
    if deltas is None:
        return True  # the session is being stopped: nothing went out, nothing goes on
    conv.record(
        TurnStarted(run.turn),
        ModelRequested(
            conv.deps.model,
            canonical_sha256([]),
            canonical_sha256(COMPACT_INSTRUCTIONS),
            sha,
            sent,
            purpose="compact",
        ),
    )
    deltas.discard()
    return True


def finish(conv: Conversation, reply: ModelReply, bodies: list[Body]) -> None:
    """Record the summary (after the reply's ``bodies``) in place of the older history, then
    go on with the task."""
    assert conv.run is not None and conv.run.compacting is not None
    run, pending = conv.run, conv.run.compacting
    run.compacting = None
    summary = reply.text.strip()
    if not summary:
        conv.record(*bodies)
        interrupts.abort(
            conv, "failed", "error", "compaction failed: the model returned an empty summary"
        )
        return
    after = conv.prompt_view.tokens(pending.kept_from) + approx_tokens(len(summary))
    done = msgspec.structs.replace(pending, summary=summary, tokens_after=after)
    if run.plan.compact is not None:
        conv.record(*bodies, done, TaskCompleted())
        conv.end()
        return
    conv.record(*bodies, done)
    run.compacted = True
    conv.next_turn()
