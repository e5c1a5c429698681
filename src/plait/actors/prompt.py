"""``PromptView``: a conversation's history as the model is shown it.

Each history message is converted and encoded once, when it is added, into one growing buffer;
building a turn's prompt then costs one copy of that buffer, not a conversion and an encoding of
the whole history. The same bytes give ``ModelRequested.messages_sha256`` (a running hash) and
each message's approximate token count (its JSON bytes divided by four).
"""

from __future__ import annotations

import bisect
import hashlib

import msgspec

from plait.events.projections.history import ChatMessage
from plait.events.projections.messages import ContentShape

__all__ = ["PromptView", "approx_tokens", "empty_content", "encoded", "transcript"]

_encode = msgspec.json.Encoder(order="sorted").encode


def empty_content(protocol: int) -> ContentShape:
    """How a session of model ``protocol`` encodes an assistant message with tool calls and
    no text (docs/models.md#the-protocol)."""
    if protocol >= 2:
        return "empty"
    return "omitted" if protocol == 1 else "null"


def approx_tokens(size: int) -> int:
    """Approximate tokens of ``size`` bytes of JSON."""
    return (size + 3) // 4


class PromptView:
    """The encoded history of one conversation, kept up to date message by message."""

    def __init__(
        self, *, strict: bool = False, reasoning: bool = False, empty: ContentShape | None = None
    ) -> None:
        """``strict``, ``reasoning`` and ``empty`` say how messages are encoded
        (``to_openai``)."""
        self.empty: ContentShape = empty or ("omitted" if strict else "null")
        """How a message without content carries it in these bytes."""
        self._strict, self._reasoning = strict, reasoning
        self._source: list[ChatMessage] | None = None
        self._body = bytearray()
        self._ends: list[int] = []
        self._hash = hashlib.sha256()

    def sync(self, history: list[ChatMessage]) -> None:
        """Encode the messages added to ``history`` since the last call; start over when the
        history was replaced. The history projection never changes a message in place: a
        compaction, a cleared context or an interrupt that edits the last message makes a
        new list."""
        if history is not self._source or len(history) < len(self._ends):
            self._source, self._body, self._ends = history, bytearray(), []
            self._hash = hashlib.sha256()
        for message in history[len(self._ends) :]:
            shown = message.to_openai(
                strict=self._strict, reasoning=self._reasoning, empty=self.empty
            )
            wire = _encode(shown)
            if self._ends:
                self._body += b","
            self._body += wire
            self._ends.append(len(self._body))
            self._hash.update(wire)

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def sha256(self) -> str:
        """Hex sha-256 over every message's canonical JSON, in order."""
        return self._hash.hexdigest()

    def prefix_sha256(self, end: int) -> str:
        """The same hash over the first ``end`` messages only."""
        digest = hashlib.sha256()
        start = 0
        for stop in self._ends[:end]:
            digest.update(self._body[start:stop])
            start = stop + 1
        return digest.hexdigest()

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """Approximate tokens of messages ``start`` to ``end``."""
        stop = len(self._ends) if end is None else end
        if stop <= start:
            return 0
        first = self._ends[start - 1] + 1 if start > 0 else 0
        return approx_tokens(self._ends[stop - 1] - first)

    def first_within(self, tokens: int) -> int:
        """The first message from which the rest of the history fits in ``tokens``."""
        if not self._ends:
            return 0
        # Message i starts at byte _ends[i-1] + 1: find the first i whose tail fits.
        need = self._ends[-1] - tokens * 4
        if need <= 0:
            return 0
        return bisect.bisect_left(self._ends, need - 1) + 1

    def messages(self, system: str, end: int | None = None) -> msgspec.Raw:
        """The prompt's ``messages`` array: the system message, then the first ``end``
        messages of the history (all by default), as JSON."""
        head = _encode({"role": "system", "content": system})
        stop = len(self._ends) if end is None else end
        if stop <= 0:
            return msgspec.Raw(b"[" + head + b"]")
        with memoryview(self._body) as body:  # released before the buffer grows again
            parts = (b"[", head, b",", body[: self._ends[stop - 1]], b"]")
            return msgspec.Raw(b"".join(parts))


def encoded(value: object) -> msgspec.Raw:
    """``value`` as JSON, encoded once (tool lists are reused turn after turn)."""
    return msgspec.Raw(_encode(value))


def transcript(history: list[ChatMessage]) -> str:
    """``history`` as one text, a line or more a message: what a compaction asks the model to
    summarise. A single user message is accepted by every server, whatever it requires of
    tool messages (a ``tools`` list beside them, roles that alternate: docs/models.md)."""
    lines = []
    for message in history:
        wire = message.to_openai()
        content = wire.get("content")
        if isinstance(content, list):  # text and image parts
            content = " ".join(p["text"] if p["type"] == "text" else "[image]" for p in content)
        if message.role == "tool":
            lines.append(f"[tool result {message.tool_call_id}]: {content}")
            continue
        if content:
            lines.append(f"{message.role}: {content}")
        for call in wire.get("tool_calls", ()):
            function = call["function"]
            lines.append(f"[tool call {call['id']}] {function['name']} {function['arguments']}")
    return "\n\n".join(lines)
