"""Reading a Chat Completions stream: the chunk fields plait reads, and the reply assembled.

Servers that call themselves OpenAI-compatible differ in what a chunk holds (docs/models.md):
reasoning as ``reasoning_content`` or ``reasoning``, tool-call arguments as an object rather
than string pieces, calls with no ``index`` or no ``id``, several calls in one chunk. The
assembly takes each of them; what it cannot read is a ``Failure`` of kind ``malformed``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Literal

import msgspec

from plait._errors import ModelErrorKind
from plait.events import ReasoningItem, ToolCall, Usage

__all__ = [
    "Assembly",
    "Cut",
    "CutBy",
    "Failure",
    "ModelReply",
    "decode_chunk",
    "encode",
    "ignore",
    "request_pieces",
    "token_limit",
]

CutBy = Literal["max_output_tokens", "max_reply_bytes", "max_reply_sec"]
"""The ``[model]`` limit at which plait stopped reading a reply (docs/models.md#reply-limits)."""


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
    cut_by: CutBy | None = None
    """The limit at which plait stopped reading the reply (its ``finish_reason`` is then
    ``length``); ``None``: the server ended it."""
    response_id: str = ""
    """The response's id as the server gave it (``chatcmpl-…``); empty if it gave none."""
    response_model: str = ""
    """The model that answered, as the server named it; empty if it named none."""
    reasoning_items: list[ReasoningItem] = []
    """Its reasoning items, whole (the Responses API's; docs/models.md#reasoning-items)."""


def ignore(_: object) -> None:
    """Do nothing (the default callback)."""


# --- the wire: just the parts of a chat.completion.chunk that plait reads ----------------------


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, object] | None = None  # some servers send an object


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
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _StreamError | None = None  # some servers report a failure in-band, mid-stream


decode_chunk = msgspec.json.Decoder(_Chunk).decode
encode = msgspec.json.Encoder().encode


def request_pieces(body: dict[str, object], key: str = "messages") -> list[bytes | memoryview]:
    """``body`` as JSON, in pieces: its already encoded ``key`` (the prompt: ``messages``, or
    the Responses API's ``input``, which may be most of the request) is sent as it is, not
    copied into one more buffer."""
    prompt = body.get(key)
    if not isinstance(prompt, msgspec.Raw):
        return [encode(body)]
    rest = encode({name: value for name, value in body.items() if name != key})
    # ``rest`` is ``{"model":...}``: the prompt goes first, the other fields after it.
    return [b'{"%s":' % key.encode(), memoryview(prompt), b",", rest[1:]]


class Failure(Exception):
    """One failed attempt, classified: what to tell people, and whether to try again."""

    def __init__(self, kind: ModelErrorKind, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.message = message
        self.status = status
        self.retryable = kind in ("rate_limited", "unavailable", "disconnected")
        self.retry_after: float | None = None  # seconds, from a retry-after header
        self.said = ""
        """The server's whole error message, when it sent one (``message`` has its start)."""
        self.empty = False
        """The server answered with a stream that ended before a byte of the reply."""
        self.deterministic = False
        """The server's own answer to this request, which the same request would get again
        (an HTTP 500 and its message, an empty stream), not a passing state such as an
        overload: asked again once, it ends the completion if it comes back the same."""


class Cut(Exception):
    """The reply passed a limit: plait stops reading it and keeps what came before."""


def token_limit(max_output_tokens: int) -> int:
    """The count past which plait cuts a reply capped at ``max_output_tokens``.

    Servers stream about one token a chunk; the count is the chunks that carried text,
    reasoning or call arguments, or the server's own ``completion_tokens`` when it reports
    them as it streams. A server that honours the cap stops first (a server that splits a
    token over two chunks may pass it a little: hence an eighth more, and 8); one that packs
    several tokens into a chunk is cut late, never early (docs/models.md#reply-limits).
    """
    return max_output_tokens + max_output_tokens // 8 + 8


class Assembly:
    """The reply being put together from stream chunks, cut at the limits it is given."""

    def __init__(
        self,
        on_text: Callable[[str], None],
        on_reasoning: Callable[[str], None] = ignore,
        *,
        max_tokens: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        """``max_tokens``: cut past this count (``token_limit``); ``max_bytes``: keep at most
        this many bytes of text, reasoning and call arguments (UTF-8)."""
        self.on_text = on_text
        self.on_reasoning = on_reasoning
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list[str]] = {}  # stream index -> [id, name, *argument fragments]
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.done = False  # saw ``data: [DONE]``
        self.response_id = ""
        self.response_model = ""
        self.cut_by: CutBy | None = None
        self.reasoning_items: list[ReasoningItem] = []
        self._max_tokens = max_tokens
        self._max_bytes = max_bytes
        self._pieces = 0  # chunks that carried a piece of the reply
        self._reported: int | None = None  # completion tokens, as the server streams them
        self._bytes = 0  # UTF-8 bytes of the pieces kept

    def cut(self, limit: CutBy) -> None:
        """Stop the reply here, at ``limit``."""
        self.cut_by = limit
        self.done = True

    def feed(self, chunk: _Chunk) -> None:
        """Take one chunk; raise ``Cut`` when the reply passes a limit (what passed it is not
        kept), ``Failure`` when the chunk reports one."""
        if chunk.error is not None:
            detail = chunk.error.message or "no message"
            raise Failure("unavailable", f"the model server failed mid-stream: {detail}")
        if chunk.id and not self.response_id:
            self.response_id = chunk.id
        if chunk.model and not self.response_model:
            self.response_model = chunk.model
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
            if self.finish_reason is None:
                self._reported = chunk.usage.completion_tokens
        for choice in chunk.choices or ():
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            if choice.delta is not None:
                self._take(choice.delta)

    def take(
        self,
        *,
        text: str | None = None,
        reasoning: str | None = None,
        call: tuple[int, str | None, str | None, str | None] | None = None,
    ) -> None:
        """Take one piece of a reply read from another wire than Chat Completions' (the
        Responses API's events): text, reasoning, or a piece of call ``(index, id, name,
        arguments)``; counted toward the limits as a chunk's would be."""
        calls = None
        if call is not None:
            index, call_id, name, arguments = call
            calls = [_ToolCallDelta(index, call_id, _Function(name, arguments))]
        self._take(_Delta(text, calls, reasoning))

    def _take(self, delta: _Delta) -> None:
        thought = delta.reasoning_content or delta.reasoning
        if self.finish_reason is None:
            self._count(delta, thought)
        if delta.content:
            self.text.append(delta.content)
            self.on_text(delta.content)
        if thought:
            self.reasoning.append(thought)
            self.on_reasoning(thought)
        for call in delta.tool_calls or ():
            self._feed_call(call)

    def _count(self, delta: _Delta, thought: str | None) -> None:
        """Count ``delta`` toward the limits before it is kept; ``Cut`` if it would pass one."""
        size = _size(delta.content) + _size(thought)
        for call in delta.tool_calls or ():
            if call.function is not None:
                size += _size(call.function.name)
                arguments = call.function.arguments
                size += _size(arguments) if isinstance(arguments, str) else len(encode(arguments))
        if not size:
            return
        if self._max_bytes is not None and self._bytes + size > self._max_bytes:
            self.cut("max_reply_bytes")
            raise Cut(f"the reply passed {self._max_bytes} bytes")
        self._bytes += size
        self._pieces += 1
        tokens = self._pieces if self._reported is None else self._reported
        if self._max_tokens is not None and tokens > token_limit(self._max_tokens):
            self.cut("max_output_tokens")
            raise Cut(f"the reply passed {self._max_tokens} tokens")

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

    @property
    def nothing(self) -> bool:
        """Whether no byte of a reply came: no text, reasoning, call or finish reason."""
        return not (self.text or self.reasoning or self.calls) and self.finish_reason is None

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
        finish = "length" if self.cut_by is not None else self.finish_reason
        return ModelReply(
            text,
            calls,
            finish,
            self.usage,
            reasoning,
            self.cut_by,
            self.response_id,
            self.response_model,
            self.reasoning_items,
        )


def _size(piece: str | None) -> int:
    """UTF-8 bytes of ``piece`` (cheap for ASCII, the usual case)."""
    if not piece:
        return 0
    return len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))


def _usage(wire: _Usage) -> Usage:
    prompt, completion = wire.prompt_tokens or 0, wire.completion_tokens or 0
    total = wire.total_tokens if wire.total_tokens is not None else prompt + completion
    cached = (wire.prompt_tokens_details or _Details()).cached_tokens or 0
    reasoning = (wire.completion_tokens_details or _Details()).reasoning_tokens or 0
    return Usage(prompt, completion, total, cached, reasoning)
