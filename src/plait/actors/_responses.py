"""The Responses API wire (``wire_api = "responses"``): a request's body, and its stream read
into the same ``Assembly`` a Chat Completions stream fills (docs/models.md#wires).

A conversation's history is sent as the input items its ``PromptView`` keeps (``ChatMessage.
to_responses``), reasoning items included, so every request holds what the model saw; nothing
depends on the server keeping a response (``store: false``, docs/models.md#reasoning-items),
unless the session asks it to (``store``: a request then goes on from the last stored
response, docs/models.md#stored-responses). A request built as chat messages (a
compaction's) is turned into items here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from plait.actors._model_types import ResponsesInput
from plait.actors._stream import Assembly, Failure
from plait.actors._text import decoded_mended
from plait.events import ModelOptions, ReasoningItem, Usage

__all__ = [
    "ENCRYPTED_REASONING",
    "ResponsesReader",
    "responses_body",
    "responses_tools",
    "without_bare_reasoning",
]

ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""What a request's ``include`` asks for: each reasoning item's content, encrypted for the
server, which the next request sends back."""

_encode = msgspec.json.Encoder(order="sorted").encode
_decode_any = msgspec.json.decode


def responses_body(
    model: str,
    options: ModelOptions,
    messages: Sequence[Mapping[str, object]] | msgspec.Raw,
    tools: list[dict[str, object]],
    *,
    given: ResponsesInput | None = None,
    include: bool = True,
) -> dict[str, object]:
    """The request body: what the conversation ``given`` (else ``messages``, chat messages,
    turned into items), the ``tools`` (as ``responses_tools`` makes them), the options.
    ``include``: ask for encrypted reasoning (a server that refused it is not asked)."""
    previous = ""
    if given is None:
        instructions, items = _from_chat(messages)
    elif given.previous_response_id and given.after is not None:
        instructions, items, previous = given.instructions, given.after, given.previous_response_id
    else:
        instructions, items = given.instructions, given.items
    body: dict[str, object] = {"model": model}
    if instructions:
        body["instructions"] = instructions
    if previous:
        body["previous_response_id"] = previous
    body["input"] = items
    if tools:
        body["tools"] = tools
        if options.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = options.parallel_tool_calls
    body["stream"] = True
    body["store"] = options.store
    if include:
        body["include"] = [ENCRYPTED_REASONING]
    if options.max_output_tokens is not None:
        body["max_output_tokens"] = options.max_output_tokens
    for name in ("temperature", "top_p"):
        value = getattr(options, name)
        if value is not None:
            body[name] = value
    if options.reasoning_effort is not None:
        body["reasoning"] = {"effort": options.reasoning_effort, "summary": "auto"}
    body.update(options.extra_body)
    return body


def without_bare_reasoning(items: object) -> msgspec.Raw | None:
    """``items`` (encoded input items) without the reasoning items that hold no reasoning
    text, for a server that refuses them (llama.cpp's ``llama-server``, which makes a reply's
    reasoning of that text); ``None`` when there are none."""
    if not isinstance(items, msgspec.Raw) or _REASONING not in bytes(memoryview(items)):
        return None
    decoded: list[dict[str, Any]] = _decode_any(items)
    kept = [i for i in decoded if i.get("type") != "reasoning" or i.get("content")]
    return None if len(kept) == len(decoded) else msgspec.Raw(_encode(kept))


_REASONING = b'"type":"reasoning"'
"""How a reasoning item's type reads in items encoded here or by ``PromptView`` (keys sorted,
no spaces)."""


def _from_chat(
    messages: Sequence[Mapping[str, object]] | msgspec.Raw,
) -> tuple[str | None, msgspec.Raw]:
    """Chat messages as instructions (the system messages' text) and input items."""
    decoded: list[dict[str, Any]] = (
        _decode_any(bytes(memoryview(messages)))
        if isinstance(messages, msgspec.Raw)
        else [dict(m) for m in messages]
    )
    system: list[str] = []
    items: list[dict[str, Any]] = []
    for message in decoded:
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            system.append(content if isinstance(content, str) else "")
        elif role == "tool":
            call = message.get("tool_call_id")
            items.append({"type": "function_call_output", "call_id": call, "output": content})
        else:
            if content or not message.get("tool_calls"):
                items.append(_chat_message_item(str(role), content))
            for call in message.get("tool_calls") or ():
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
    return "\n\n".join(system) or None, msgspec.Raw(_encode(items))


def _chat_message_item(role: str, content: object) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    if not isinstance(content, list):
        return {"type": "message", "role": role, "content": [{"type": kind, "text": content or ""}]}
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            url = part["image_url"]
            parts.append({"type": "input_image", "image_url": url["url"], "detail": url["detail"]})
        else:
            parts.append({"type": kind, "text": part.get("text", "")})
    return {"type": "message", "role": role, "content": parts}


def responses_tools(tools: Sequence[Mapping[str, object]] | msgspec.Raw) -> list[dict[str, object]]:
    """Chat Completions function tools (``{"type": "function", "function": {...}}``) as the
    Responses API takes them: flat, and not strict unless a tool says so (the API's default
    is strict, which most MCP tools' schemas do not meet)."""
    specs = _decode_any(bytes(memoryview(tools))) if isinstance(tools, msgspec.Raw) else tools
    out: list[dict[str, object]] = []
    for spec in specs:
        function = spec.get("function")
        if not isinstance(function, Mapping):
            out.append(dict(spec))  # already flat
            continue
        flat: dict[str, object] = {"type": "function", "strict": False, **function}
        out.append(flat)
    return out


# --- the stream -------------------------------------------------------------------------------


class _Part(msgspec.Struct):
    text: str = ""


class _Item(msgspec.Struct):
    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    summary: list[_Part] | None = None
    content: list[_Part] | None = None
    encrypted_content: str | None = None


class _Details(msgspec.Struct):
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _Error(msgspec.Struct):
    message: str | None = None
    code: str | None = None


class _Response(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    usage: _Usage | None = None
    incomplete_details: _Incomplete | None = None
    error: _Error | None = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    output_index: int | None = None
    item_id: str | None = None
    item: _Item | None = None
    response: _Response | None = None
    message: str | None = None  # an ``error`` event's
    code: str | None = None


_decode_event = msgspec.json.Decoder(_Event).decode


def _decoded(data: bytes) -> _Event:
    """An event; undecodable bytes and lone surrogates in its text are read as U+FFFD, and so
    recorded, as a chat stream's are (docs/event-log.md#text)."""
    return decoded_mended(_decode_event, data)


_FINISHED = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""An incomplete response's reason, as the Chat Completions finish reason plait records."""


class ResponsesReader:
    """Reads one Responses API stream's events into an ``Assembly``."""

    def __init__(self, assembly: Assembly) -> None:
        self.assembly = assembly
        self._calls: dict[str | int, int] = {}  # item id, call id, output index -> the call
        # (servers differ in which they send: llama.cpp's sends no output index)
        self._texted: set[int] = set()  # output indexes whose text came as deltas

    def feed(self, data: bytes) -> None:
        """Take one event (an SSE ``data:`` line's JSON); raise ``Failure`` when it reports
        one, ``Cut`` when the reply passes a limit."""
        try:
            event = _decoded(data)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            raise Failure(
                "malformed", f"malformed stream from the model server: {exc}: {data[:80]!r}"
            ) from exc
        assembly, kind = self.assembly, event.type
        if kind == "response.output_text.delta" and event.delta:
            self._texted.add(event.output_index or 0)
            assembly.take(text=event.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if event.delta:
                assembly.take(reasoning=event.delta)
        elif kind == "response.output_item.added" and event.item is not None:
            self._added(event.item, event.output_index)
        elif kind == "response.function_call_arguments.delta" and event.delta:
            index = self._call(event.item_id, None, event.output_index)
            if index is not None:
                assembly.take(call=(index, None, None, event.delta))
        elif kind == "response.output_item.done" and event.item is not None:
            self._done(event.item, event.output_index)
        elif kind in ("response.created", "response.in_progress") and event.response:
            self._named(event.response)
        elif kind in ("response.completed", "response.incomplete"):
            self._finished(event.response, kind == "response.completed")
        elif kind in ("response.failed", "error"):
            error = event.response.error if event.response is not None else None
            said = (error.message if error else None) or event.message or "no message"
            raise Failure("unavailable", f"the model server failed mid-stream: {said}")

    def _named(self, response: _Response) -> None:
        if response.id and not self.assembly.response_id:
            self.assembly.response_id = response.id
        if response.model and not self.assembly.response_model:
            self.assembly.response_model = response.model

    def _added(self, item: _Item, output_index: int | None) -> None:
        if item.type != "function_call":
            return
        index = len(self.assembly.calls)
        for key in (item.id, item.call_id, output_index):
            if key is not None:
                self._calls[key] = index
        self.assembly.take(call=(index, item.call_id or "", item.name or "", item.arguments))

    def _call(
        self, item_id: str | None, call_id: str | None, output_index: int | None
    ) -> int | None:
        """The reply's index of the call an event names by any of its keys; with none, the
        last call begun."""
        keys = [key for key in (item_id, call_id, output_index) if key is not None]
        for key in keys:
            if key in self._calls:
                return self._calls[key]
        if not keys and self.assembly.calls:
            return max(self.assembly.calls)
        return None

    def _done(self, item: _Item, output_index: int | None) -> None:
        if item.type == "reasoning":
            self.assembly.reasoning_items.append(
                ReasoningItem(
                    item.id or "",
                    [part.text for part in item.summary or ()],
                    [part.text for part in item.content or ()],
                    item.encrypted_content or "",
                )
            )
        elif item.type == "function_call":
            # A server may send a call whole at its end, or its arguments only there.
            index = self._call(item.id, item.call_id, output_index)
            if index is None:
                self._added(item, output_index)
            elif len(self.assembly.calls.get(index, ())) <= 2 and item.arguments:
                self.assembly.take(call=(index, None, None, item.arguments))
        elif item.type == "message" and (output_index or 0) not in self._texted:
            for part in item.content or ():  # a server that sends the text whole, at its end
                if part.text:
                    self.assembly.take(text=part.text)

    def _finished(self, response: _Response | None, completed: bool) -> None:
        assembly = self.assembly
        if response is not None:
            self._named(response)
            if response.usage is not None:
                assembly.usage = _usage(response.usage)
        if completed:
            assembly.finish_reason = "tool_calls" if assembly.calls else "stop"
        else:
            details = response.incomplete_details if response is not None else None
            reason = details.reason if details is not None else None
            assembly.finish_reason = _FINISHED.get(reason or "", "length")
        assembly.done = True


def _usage(wire: _Usage) -> Usage:
    prompt, completion = wire.input_tokens or 0, wire.output_tokens or 0
    total = wire.total_tokens if wire.total_tokens is not None else prompt + completion
    cached = (wire.input_tokens_details or _Details()).cached_tokens or 0
    reasoning = (wire.output_tokens_details or _Details()).reasoning_tokens or 0
    return Usage(prompt, completion, total, cached, reasoning)
