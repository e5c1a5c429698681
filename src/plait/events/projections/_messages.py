"""One message of a conversation's history, and the form the Chat Completions API takes it in
(docs/conversations.md#how-a-turn-is-stored, docs/models.md#the-protocol).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from plait.events._values import (
    Content,
    InputImage,
    InputText,
    Redacted,
    ToolCall,
)

__all__ = ["ChatMessage", "ContentShape", "Part", "shown_text"]

Part = InputText | InputImage
"""What a user or tool message's content holds when it is not plain text."""

ContentShape = Literal["empty", "omitted", "null"]
"""How an assistant message with tool calls and no text carries its ``content``: ``""``, no
key, or ``null``. Servers differ on which they accept (docs/models.md#content-shapes)."""


class ChatMessage(msgspec.Struct, omit_defaults=True, gc=False):
    """One chat message of a conversation's history."""

    role: Literal["user", "assistant", "tool"]
    """Who speaks."""
    content: Content | list[Part] | None = None
    """Text, content parts (text and images), or ``None`` for a tool-calls-only assistant turn."""
    tool_calls: tuple[ToolCall, ...] | None = None
    """For an assistant message: the calls it made (a tuple: once the collector has seen that
    it holds only untracked structs it stops scanning it, which a history of a million
    messages needs)."""
    tool_call_id: str | None = None
    """For a tool message: the call it answers."""
    seq: int = 0
    """The seq of the event that wrote it."""
    reasoning: Content | None = None
    """For an assistant message: the reasoning the server streamed beside it, if any."""

    def to_openai(
        self, *, strict: bool = False, reasoning: bool = False, empty: ContentShape | None = None
    ) -> dict[str, Any]:
        """Return the message as the Chat Completions API takes it.

        ``strict``: the form the strictest servers accept (docs/models.md#the-protocol): a
        call's arguments that are not a JSON object (a reply cut off mid-call, a model's
        malformed JSON) are sent as ``{}``; the call's answer says why it was not run.
        ``empty``: how a message without content (an assistant message with tool calls and no
        text) carries it; by default no ``content`` key when ``strict``, else ``null``.
        ``reasoning``: an assistant message with tool calls carries its reasoning as
        ``reasoning_content``.
        """
        content = self.content
        if self.role == "tool" and isinstance(content, list):
            # Chat Completions takes only text from a tool: say what else there was.
            texts = [shown_text(p.text) for p in content if isinstance(p, InputText)]
            images = sum(1 for p in content if isinstance(p, InputImage))
            content = "\n".join([*texts, f"[{images} image(s) returned, kept as attachments]"])
        out: dict[str, Any] = {"role": self.role}
        if content is not None:
            out["content"] = _wire_content(content)
        else:
            shape = empty or ("omitted" if strict else "null")
            if shape != "omitted":
                out["content"] = "" if shape == "empty" else None
        if reasoning and self.tool_calls and self.reasoning:
            out["reasoning_content"] = shown_text(self.reasoning)
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments(call, strict)},
                }
                for call in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


def _arguments(call: ToolCall, strict: bool) -> str:
    arguments = shown_text(call.arguments)
    if strict and not _is_object(arguments):
        return "{}"
    return arguments


_decode = msgspec.json.decode


def _is_object(text: str) -> bool:
    if not text.startswith("{"):
        return False
    try:
        return isinstance(_decode(text), dict)
    except msgspec.DecodeError:
        return False


def shown_text(content: Content) -> str:
    """``content`` as the model is shown it: its text, or what stands for content that is gone."""
    if isinstance(content, str):
        return content
    if isinstance(content, Redacted):
        return content.text
    return f"[blob sha256:{content.sha256}]"


def _wire_content(content: Content | list[Part]) -> Any:
    if not isinstance(content, list):
        return shown_text(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, InputText):
            parts.append({"type": "text", "text": shown_text(part.text)})
        else:
            url = {"url": shown_text(part.image_url), "detail": part.detail}
            parts.append({"type": "image_url", "image_url": url})
    return parts
