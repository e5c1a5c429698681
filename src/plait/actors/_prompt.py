"""``PromptView``: a conversation's history as the model is shown it.

Each history message is converted and encoded once, when it is added, into one growing buffer;
building a turn's prompt then costs one copy of that buffer, not a conversion and an encoding of
the whole history. The same bytes give ``ModelRequested.messages_sha256`` (a running hash) and
each message's approximate token count (its JSON bytes divided by four).

Those bytes hold an assistant message with tool calls and no text as the session's protocol
does. Once the runtime's model client sends another shape (docs/models.md#content-shapes), the
view keeps a second buffer in that shape, built once from the first and then grown beside it, so
a request costs no more than before; hashes and token counts stay on the first. On the Responses
API (docs/models.md#wires) it keeps the messages' input items beside them the same way, each
message's encoded once, reasoning items included.
"""

from __future__ import annotations

import bisect
import hashlib

import msgspec

from plait.events.projections import ChatMessage, ContentShape

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


class _Shaped:
    """The history's messages in one content shape, encoded and joined by commas."""

    __slots__ = ("body", "ends", "shape")

    def __init__(self, shape: ContentShape) -> None:
        self.shape = shape
        self.body = bytearray()
        self.ends: list[int] = []
        """Where each message's bytes end in ``body``."""

    def add(self, wire: bytes | memoryview) -> None:
        if self.ends:
            self.body += b","
        self.body += wire
        self.ends.append(len(self.body))

    def add_each(self, values: list[dict[str, object]]) -> None:
        """Add one message as ``values`` (its input items), each encoded, then copied in (an
        encoder writing into the body would leave it half as large again, for good)."""
        for value in values:
            if self.body:
                self.body += b","
            self.body += _encode(value)
        self.ends.append(len(self.body))


class PromptView:
    """The encoded history of one conversation, kept up to date message by message."""

    def __init__(
        self,
        *,
        strict: bool = False,
        reasoning: bool = False,
        empty: ContentShape | None = None,
        items: bool = False,
    ) -> None:
        """``strict``, ``reasoning`` and ``empty`` say how messages are encoded
        (``to_openai``); ``items``: keep their Responses API input items too
        (``to_responses``)."""
        self.empty: ContentShape = empty or ("omitted" if strict else "null")
        """How a message without content carries it in these bytes (and their hashes)."""
        self._strict, self._reasoning = strict, reasoning
        self._source: list[ChatMessage] | None = None
        self._main = _Shaped(self.empty)
        self._hash = hashlib.sha256()
        self._other: _Shaped | None = None
        """The same messages in the shape last asked for, when it is not ``empty``."""
        self._items: _Shaped | None = _Shaped(self.empty) if items else None
        """The same messages as input items, when they are kept."""

    def sync(self, history: list[ChatMessage]) -> None:
        """Encode the messages added to ``history`` since the last call; start over when the
        history was replaced. The history projection never changes a message in place: a
        compaction, a cleared context or an interrupt that edits the last message makes a
        new list."""
        if history is not self._source or len(history) < len(self._main.ends):
            self._source, self._main = history, _Shaped(self.empty)
            self._hash = hashlib.sha256()
            if self._other is not None:
                self._other = _Shaped(self._other.shape)
            if self._items is not None:
                self._items = _Shaped(self.empty)
        other, items = self._other, self._items
        for message in history[len(self._main.ends) :]:
            wire = self._encoded(message, self.empty)
            self._main.add(wire)
            self._hash.update(wire)
            if other is not None:
                # Only a message without content differs from one shape to another.
                other.add(
                    wire if message.content is not None else self._encoded(message, other.shape)
                )
            del wire  # a large message is not held twice while its items are made
            if items is not None:
                items.add_each(message.to_responses(strict=self._strict))

    def _encoded(self, message: ChatMessage, shape: ContentShape) -> bytes:
        shown = message.to_openai(strict=self._strict, reasoning=self._reasoning, empty=shape)
        return _encode(shown)

    def _in(self, shape: ContentShape) -> _Shaped:
        """The messages in ``shape``: the first time, copied from ``empty``'s bytes, each
        message without content encoded again."""
        if self._other is not None and self._other.shape == shape:
            return self._other
        other, start = _Shaped(shape), 0
        with memoryview(self._main.body) as body:
            for message, stop in zip(self._source or (), self._main.ends, strict=False):
                if message.content is None:
                    other.add(self._encoded(message, shape))
                else:
                    other.add(body[start:stop])
                start = stop + 1
        self._other = other
        return other

    def __len__(self) -> int:
        return len(self._main.ends)

    @property
    def sha256(self) -> str:
        """Hex sha-256 over every message's canonical JSON, in order."""
        return self._hash.hexdigest()

    def prefix_sha256(self, end: int) -> str:
        """The same hash over the first ``end`` messages only."""
        digest = hashlib.sha256()
        start = 0
        for stop in self._main.ends[:end]:
            digest.update(self._main.body[start:stop])
            start = stop + 1
        return digest.hexdigest()

    def tokens(self, start: int = 0, end: int | None = None) -> int:
        """Approximate tokens of messages ``start`` to ``end``."""
        stop = len(self._main.ends) if end is None else end
        if stop <= start:
            return 0
        first = self._main.ends[start - 1] + 1 if start > 0 else 0
        return approx_tokens(self._main.ends[stop - 1] - first)

    def first_within(self, tokens: int) -> int:
        """The first message from which the rest of the history fits in ``tokens``."""
        if not self._main.ends:
            return 0
        # Message i starts at byte _ends[i-1] + 1: find the first i whose tail fits.
        need = self._main.ends[-1] - tokens * 4
        if need <= 0:
            return 0
        return bisect.bisect_left(self._main.ends, need - 1) + 1

    def messages(
        self, system: str, end: int | None = None, shape: ContentShape | None = None
    ) -> msgspec.Raw:
        """The prompt's ``messages`` array: the system message, then the first ``end``
        messages of the history (all by default), as JSON; messages without content in
        ``shape`` (by default ``empty``: the shape the hashes cover)."""
        head = _encode({"role": "system", "content": system})
        stop = len(self._main.ends) if end is None else end
        if stop <= 0:
            return msgspec.Raw(b"[" + head + b"]")
        shaped = self._main if shape is None or shape == self.empty else self._in(shape)
        with memoryview(shaped.body) as body:  # released before the buffer grows again
            parts = (b"[", head, b",", body[: shaped.ends[stop - 1]], b"]")
            return msgspec.Raw(b"".join(parts))

    def input_items(self, start: int = 0) -> msgspec.Raw:
        """The Responses API ``input``: the input items of every message from ``start``, as
        JSON (kept only when the view was made with ``items``)."""
        assert self._items is not None, "a view made without items"
        items = self._items
        first = items.ends[start - 1] + 1 if 0 < start <= len(items.ends) else 0
        with memoryview(items.body) as body:  # released before the buffer grows again
            return msgspec.Raw(b"".join((b"[", body[first:], b"]")))

    def goes_on_from(self) -> tuple[str, msgspec.Raw] | None:
        """The stored response the history goes on from, and the input items after it: its
        last reply, if the server keeps it (``ChatMessage.response_id``) and the history
        before it is still what its request sent; ``None`` otherwise (a compaction or a trim
        since, a reply not kept: docs/models.md#stored-responses)."""
        source = self._source or []
        for index in range(len(source) - 1, -1, -1):
            message = source[index]
            if message.role != "assistant":
                continue
            if message.response_id and self.prefix_sha256(index) == message.sent_sha256:
                return message.response_id, self.input_items(index + 1)
            return None
        return None


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
