"""One message of a conversation's history, and the forms the model APIs take it in: a Chat
Completions message, or the Responses API's input items
(docs/conversations.md#how-a-turn-is-stored, docs/models.md#the-protocol,
docs/models.md#wires).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from plait.events._values import (
    Content,
    InputImage,
    InputText,
    ReasoningItem,
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
    reasoning_items: tuple[ReasoningItem, ...] | None = None
    """For an assistant message on the Responses API: its reasoning items, sent back before
    it (docs/models.md#reasoning-items)."""
    response_id: str = ""
    """For a reply the server keeps (``store``): its response's id."""
    sent_sha256: str = ""
    """For a reply the server keeps: the hash of the history its request sent
    (``ModelRequested.messages_sha256``), which tells whether that history is still the
    prefix of this one (docs/models.md#stored-responses)."""

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

    def to_responses(self, *, strict: bool = False) -> list[dict[str, Any]]:
        """Return the message as the Responses API's input items: an assistant message's
        reasoning items first, then its text, then each call (``function_call``); a tool
        message is a ``function_call_output``. A reasoning item goes without its id: whole
        with its encrypted content, it needs nothing the server may not keep. ``strict`` as
        ``to_openai`` has it."""
        if self.role == "tool":
            output = self.to_openai(strict=strict)["content"]
            return [
                {"type": "function_call_output", "call_id": self.tool_call_id, "output": output}
            ]
        items: list[dict[str, Any]] = []
        for reasoning in self.reasoning_items or ():
            items.append(_reasoning_item(reasoning))
        content = self.content
        if content is not None or not self.tool_calls:
            items.append(_message_item(self.role, "" if content is None else content))
        for call in self.tool_calls or ():
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": _arguments(call, strict),
                }
            )
        return items


def _reasoning_item(reasoning: ReasoningItem) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning"}
    item["summary"] = [{"type": "summary_text", "text": text} for text in reasoning.summary]
    if reasoning.content:
        item["content"] = [{"type": "reasoning_text", "text": text} for text in reasoning.content]
    if reasoning.encrypted_content:
        item["encrypted_content"] = reasoning.encrypted_content
    return item


def _message_item(role: str, content: Content | list[Part]) -> dict[str, Any]:
    """A user or assistant message as an input item: its text and images as content parts."""
    kind = "output_text" if role == "assistant" else "input_text"
    if not isinstance(content, list):
        return {
            "type": "message",
            "role": role,
            "content": [{"type": kind, "text": shown_text(content)}],
        }
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, InputText):
            parts.append({"type": kind, "text": shown_text(part.text)})
        else:
            url = shown_text(part.image_url)
            parts.append({"type": "input_image", "image_url": url, "detail": part.detail})
    return {"type": "message", "role": role, "content": parts}


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
