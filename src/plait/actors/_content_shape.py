"""The ``content`` of an assistant message with tool calls and no text, as each server takes it.

OpenAI, vLLM, Ollama and recent llama.cpp servers accept ``""``, no key and ``null`` alike;
llama-cpp-python's server accepts only ``""``, older llama.cpp servers ``""`` alone too, and
some proxies refuse ``""`` (docs/models.md#content-shapes). A server that fails on the shape
sent is asked again once with the next one (``Fallback``), and its client keeps the one that
worked; a conversation's ``PromptView`` then encodes its history in that shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, cast

import msgspec

from plait.actors._stream import Failure
from plait.events.projections import ContentShape

__all__ = [
    "SHAPES",
    "Fallback",
    "Messages",
    "described",
    "next_shape",
    "points_at_content",
    "reshaped",
]

Messages = Sequence[Mapping[str, object]] | msgspec.Raw
"""A request's messages: dicts, or that list already encoded."""

SHAPES: tuple[ContentShape, ...] = ("empty", "omitted", "null")
"""In the order they are tried: the first is accepted by the most servers."""

_DESCRIBED: dict[ContentShape, str] = {
    "empty": '"content": ""',
    "omitted": 'no "content" key',
    "null": '"content": null',
}

_CONTENT = re.compile(
    r"(?<![\w-])content(?![\w-])(?!\s+(?:polic|filter|management|moderation))", re.IGNORECASE
)
"""``content`` as a word, not ``Content-Type``, ``content_filter`` or a content policy."""


def described(shape: ContentShape) -> str:
    """``shape`` as people read it: ``"content": ""``, ``no "content" key``, ``"content": null``."""
    return _DESCRIBED[shape]


def points_at_content(failure: Failure) -> bool:
    """Whether ``failure`` may come of the content shape: an error answer (not auth or rate
    limits) whose message names a message's content, or a stream that ended before a byte
    of the reply."""
    if failure.empty:
        return True
    said = failure.said or failure.message
    refused = failure.kind in ("bad_request", "unavailable") and failure.status is not None
    return refused and _CONTENT.search(said) is not None


def next_shape(messages: Messages) -> ContentShape | None:
    """The shape to try after the one ``messages`` hold; ``None`` when they hold no assistant
    message with tool calls and no text, so the shape is not in play."""
    if isinstance(messages, msgspec.Raw) and b'"tool_calls"' not in bytes(memoryview(messages)):
        return None
    current = _shape_in(_decoded(messages))
    if current is None:
        return None
    return next(shape for shape in SHAPES if shape != current)


def reshaped(messages: Messages, shape: ContentShape) -> Messages:
    """``messages`` with each assistant message with tool calls and no text in ``shape``
    (``messages`` themselves when they hold none)."""
    if isinstance(messages, msgspec.Raw) and b'"tool_calls"' not in bytes(memoryview(messages)):
        return messages  # the usual case, told without decoding the history
    decoded = _decoded(messages)
    if _shape_in(decoded) is None:
        return messages
    out = []
    for message in decoded:
        if _blank_call(message):
            message = {k: v for k, v in message.items() if k != "content"}
            if shape != "omitted":
                message["content"] = "" if shape == "empty" else None
        out.append(message)
    return msgspec.Raw(msgspec.json.encode(out))


class Fallback:
    """The fallback of one completion: asked again once, with the next shape, when the server
    failed on the request in a way that can come of the shape of its messages."""

    def __init__(self) -> None:
        self.shape: ContentShape | None = None
        """The shape the request was sent again in; ``None`` until it is."""

    def reshape(self, failure: Failure, body: MutableMapping[str, object]) -> str:
        """Put ``body``'s messages in the next shape when ``failure`` may come of theirs and no
        other was tried; say how, or ``""`` (``body`` left as it was)."""
        if self.shape is not None or not points_at_content(failure):
            return ""
        messages = cast(Messages, body["messages"])
        shape = next_shape(messages)  # None for a request with no such message
        if shape is None:
            return ""
        self.shape = shape
        body["messages"] = reshaped(messages, shape)
        return f"with {described(shape)} on assistant messages with tool calls"

    def refused(self, failure: Failure) -> str:
        """What to add to ``failure``'s message when it failed so again once sent in the next
        shape (it may come of that shape too, and is not asked a third time); ``""`` when the
        request was not sent again so, or failed on something else."""
        if self.shape is None or not points_at_content(failure):
            return ""
        return f" (and again when sent with {described(self.shape)})"


def _decoded(messages: Messages) -> list[dict[str, Any]]:
    if isinstance(messages, msgspec.Raw):
        decoded: object = msgspec.json.decode(messages)
        return decoded if isinstance(decoded, list) else []
    return [dict(m) for m in messages]


def _shape_in(messages: list[dict[str, Any]]) -> ContentShape | None:
    """How the first assistant message with tool calls and no text carries its content."""
    for message in messages:
        if _blank_call(message):
            if "content" not in message:
                return "omitted"
            return "null" if message["content"] is None else "empty"
    return None


def _blank_call(message: object) -> bool:
    """Whether ``message`` is an assistant message with tool calls and no text."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    return bool(message.get("tool_calls")) and message.get("content") in (None, "")
