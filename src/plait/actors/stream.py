"""Reading a Chat Completions stream: the chunk fields plait reads, and the reply assembled.

Servers that call themselves OpenAI-compatible differ in what a chunk holds (docs/models.md):
reasoning as ``reasoning_content`` or ``reasoning``, tool-call arguments as an object rather
than string pieces, calls with no ``index`` or no ``id``, several calls in one chunk. The
assembly takes each of them; what it cannot read is a ``Failure`` of kind ``malformed``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from plait.errors import ModelErrorKind
from plait.events.values import ToolCall, Usage

__all__ = ["Assembly", "Failure", "ModelReply", "decode_chunk", "encode", "ignore"]


class ModelReply(msgspec.Struct, frozen=True):
    """The whole streamed response, assembled."""

    text: str
    """Assistant text: every streamed fragment, concatenated."""
    tool_calls: list[ToolCall]
    """Tool calls in the order of their stream ``index``, arguments exactly as streamed."""
    finish_reason: str | None
    """As the server reported it (``stop``, ``tool_calls``, ``length``...)."""
    usage: Usage | None
    """Token usage, when the server sent it."""
    reasoning: str = ""
    """Reasoning text streamed beside the reply (``reasoning_content``/``reasoning``)."""


def ignore(_: object) -> None:
    """Do nothing (the default callback)."""


# --- the wire: just the parts of a chat.completion.chunk that plait reads ----------------------


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None  # some servers send an object


class _ToolCallDelta(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None
    reasoning_content: str | None = None  # DeepSeek, Qwen, llama.cpp, vLLM before 0.10
    reasoning: str | None = None  # gpt-oss servers, newer vLLM


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Details(msgspec.Struct):
    cached_tokens: int | None = None  # in prompt_tokens_details
    reasoning_tokens: int | None = None  # in completion_tokens_details


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _Details | None = None


class _StreamError(msgspec.Struct):
    message: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _StreamError | None = None  # some servers report a failure in-band, mid-stream


decode_chunk = msgspec.json.Decoder(_Chunk).decode
encode = msgspec.json.Encoder().encode


class Failure(Exception):
    """One failed attempt, classified: what to tell people, and whether to try again."""

    def __init__(self, kind: ModelErrorKind, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.message = message
        self.status = status
        self.retryable = kind in ("rate_limited", "unavailable", "disconnected")
        self.retry_after: float | None = None  # seconds, from a retry-after header


class Assembly:
    """The reply being put together from stream chunks."""

    def __init__(
        self, on_text: Callable[[str], None], on_reasoning: Callable[[str], None] = ignore
    ) -> None:
        self.on_text = on_text
        self.on_reasoning = on_reasoning
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # stream index -> [id, name, *argument fragments]
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False  # saw ``data: [DONE]``

    def feed(self, chunk: _Chunk) -> None:
        if chunk.error is not None:
            detail = chunk.error.message or "no message"
            raise Failure("unavailable", f"the model server failed mid-stream: {detail}")
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices or ():
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
                self.on_text(delta.content)
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                self.reasoning.append(thought)
                self.on_reasoning(thought)
            for call in delta.tool_calls or ():
                self._feed_call(call)

    def _feed_call(self, delta: _ToolCallDelta) -> None:
        index, function = delta.index, delta.function
        if index is None:
            # A server that omits it: a new id, or a name (sent only in a call's first
            # delta), starts a call; anything else continues the last one.
            ids = [parts[0] for parts in self.calls.values()]
            new = delta.id not in ids if delta.id else bool(function and function.name)
            index = len(self.calls) if new or not self.calls else max(self.calls)
        parts = self.calls.setdefault(index, ["", ""])
        if delta.id and not parts[0]:
            parts[0] = delta.id
        if function is not None:
            if function.name and not parts[1]:
                parts[1] = function.name
            arguments = function.arguments
            if isinstance(arguments, dict):  # the whole arguments, as an object
                parts.append(encode(arguments).decode())
            elif arguments:
                parts.append(arguments)

    def reply(self) -> ModelReply:
        # A call without an id gets one here: it enters the log with the reply, so a replay
        # sees the same.
        calls = [
            ToolCall(
                id=p[0] or f"call_{uuid.uuid4().hex[:24]}", name=p[1], arguments="".join(p[2:])
            )
            for _, p in sorted(self.calls.items())
        ]
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        return ModelReply(text, calls, self.finish_reason, self.usage, reasoning)


def _usage(wire: _Usage) -> Usage:
    prompt, completion = wire.prompt_tokens or 0, wire.completion_tokens or 0
    total = wire.total_tokens if wire.total_tokens is not None else prompt + completion
    cached = (wire.prompt_tokens_details or _Details()).cached_tokens or 0
    reasoning = (wire.completion_tokens_details or _Details()).reasoning_tokens or 0
    return Usage(prompt, completion, total, cached, reasoning)
