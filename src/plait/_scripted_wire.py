"""What ``ScriptedModelServer`` (``plait.testing``) answers: its script's steps, and each answer
as OpenAI's Chat Completions shapes it, or as a server with the given quirks would.

Pure functions of a step and a request body; the HTTP server is ``testing.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from typing import Any

import msgspec

__all__ = [
    "PROFILES",
    "QUIRKS",
    "ScriptedToolCall",
    "Step",
    "capped",
    "chunks",
    "completion",
    "crashes",
    "cut",
    "endless",
    "error_body",
    "finish",
    "pieces",
    "refusal",
    "usage",
]

QUIRKS: dict[str, str] = {
    "strict_null_content": "HTTP 500 for a message whose content is null (llama.cpp's server)",
    "missing_content": "HTTP 500 for a message without content (older llama.cpp servers)",
    "null_content_invalid": "HTTP 500, a validation error, for an assistant message whose "
    "content is null (llama-cpp-python's server)",
    "no_content_crash": "HTTP 200, then a stream that ends without a byte, for a message "
    "without content (llama-cpp-python's server)",
    "empty_content_refused": 'HTTP 400 for an assistant message with tool calls and "content": '
    '"" (servers that refuse empty text)',
    "no_usage": "no usage, even when stream_options.include_usage asks for it",
    "no_stream_options": "HTTP 400 for a request with stream_options",
    "max_completion_tokens_only": "HTTP 400 for max_tokens (OpenAI's reasoning models)",
    "tools_required": "HTTP 400 for tool calls or results in a request that offers no tools",
    "reasoning_required": "HTTP 400 for an assistant message with tool calls and no "
    "reasoning_content (DeepSeek's thinking mode)",
    "reasoning_field": "reasoning streamed as delta.reasoning, not delta.reasoning_content",
    "object_arguments": "each tool call whole in one delta, its arguments a JSON object",
    "no_tool_index": "tool-call deltas without index",
    "no_call_id": "tool calls without id",
    "calls_in_one_chunk": "all of a reply's tool calls whole in one chunk",
    "reasoning_text_required": "on the Responses API, HTTP 400 for a reasoning item without "
    "reasoning text in its content (llama.cpp's llama-server)",
}
"""The quirks ``ScriptedModelServer`` can imitate, each with what it does."""

PROFILES: dict[str, frozenset[str]] = {
    "llama-cpp-python": frozenset({"null_content_invalid", "no_content_crash"}),
    "llama.cpp-old": frozenset({"strict_null_content", "missing_content"}),
}
"""Quirks that go together, as named servers have them (docs/models.md#content-shapes)."""


class ScriptedToolCall(msgspec.Struct, frozen=True):
    """A function call the scripted model makes."""

    name: str
    """The function's name, e.g. ``conv_create``."""
    arguments: str = "{}"
    """The arguments as a JSON string; streamed in about three fragments."""
    id: str | None = None
    """The call id; default ``call_<n>``, ``n`` counting calls (from 1) over the server's life."""


class Step(msgspec.Struct, frozen=True):
    """One scripted answer: the reply to one request, on Chat Completions or Responses."""

    text: str = ""
    """Assistant text, streamed in chunks of ``chunk_chars`` characters."""
    tool_calls: list[ScriptedToolCall] = []
    """Function calls, after the text."""
    finish_reason: str | None = None
    """Default ``"tool_calls"`` if there are tool calls, else ``"stop"``."""
    prompt_tokens: int | None = None
    """Reported prompt tokens; default a rough count, the request body's bytes // 4."""
    completion_tokens: int | None = None
    """Reported completion tokens; default ``len(text) // 4`` plus 10 per tool call."""
    send_usage: bool = True
    """Report usage: the last chunk if the client asked (``stream_options.include_usage``), or
    the ``usage`` field of a non-streamed answer."""
    chunk_chars: int = 8
    """Characters of text per streamed chunk."""
    chunk_delay: float = 0.0
    """Seconds to wait between streamed chunks (simulated model latency)."""
    status: int | None = None
    """Answer with this HTTP error status and an OpenAI-style error body instead."""
    error_message: str = "scripted error"
    """The error body's message when ``status`` is set."""
    disconnect_after: int | None = None
    """Stream this many chunks, then drop the connection without ``[DONE]`` (a non-streamed
    request gets no answer at all)."""
    malformed: bool = False
    """After the first chunk, send the line ``data: {not json`` and end the stream."""
    reasoning: str = ""
    """Reasoning text, streamed before the text as ``reasoning_content`` deltas (or
    ``reasoning``, under the ``reasoning_field`` quirk), or on Responses as a reasoning item's
    summary; counted in the completion tokens."""
    endless: bool = False
    """Stream ``text`` (default ``"and so on "``) again and again and never finish, whatever
    the output cap, until the client hangs up: a server that does not stop. A non-streamed
    request gets the text once."""
    failure: str | None = None
    """Fail with this message once the answer has begun: a stream sends the reasoning and the
    text, then, instead of the tool calls and the finish, an error (a chat chunk
    ``{"error": ...}``; a Responses ``response.failed`` event); a non-streamed request gets
    HTTP 500 with it."""


_ERROR_KINDS = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body for an HTTP ``status``: ``param`` names the request field at fault,
    ``code`` (default: the status's usual one) the error."""
    default = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, usual = _ERROR_KINDS.get(status, default)
    error = {"message": message, "type": kind, "param": param, "code": code or usual}
    return {"error": error}


def pieces(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters, as it is streamed."""
    size = max(size, 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


def finish(step: Step) -> str:
    """The step's chat finish reason."""
    if step.finish_reason is not None:
        return step.finish_reason
    return "tool_calls" if step.tool_calls else "stop"


def usage(step: Step, request_bytes: int) -> dict[str, Any]:
    prompt = request_bytes // 4 if step.prompt_tokens is None else step.prompt_tokens
    reasoning = len(step.reasoning) // 4
    completion = step.completion_tokens
    if completion is None:
        completion = len(step.text) // 4 + 10 * len(step.tool_calls) + reasoning
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def refusal(quirks: frozenset[str], body: dict[str, Any]) -> tuple[int, str] | None:
    """The error status and message a quirk answers ``body`` with, if one refuses it."""
    messages = body.get("messages")
    messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    if "strict_null_content" in quirks:
        for i, message in enumerate(messages):
            if "content" in message and message["content"] is None:
                return 500, f"messages[{i}]: content must be a string or an array, not null"
    if "missing_content" in quirks and any("content" not in m for m in messages):
        return 500, "Missing 'content' (ref: https://github.com/ggerganov/llama.cpp/issues/8367)"
    if "null_content_invalid" in quirks:
        for i, message in enumerate(messages):
            null = "content" in message and message["content"] is None
            if null and message.get("role") == "assistant":
                return 500, _validation_error(i)
    if "empty_content_refused" in quirks:
        for i, message in enumerate(messages):
            if message.get("tool_calls") and message.get("content") == "":
                return 400, f"messages.{i}: text content blocks must be non-empty"
    if "no_stream_options" in quirks and "stream_options" in body:
        return 400, "Unrecognized request argument supplied: stream_options"
    if "max_completion_tokens_only" in quirks and "max_tokens" in body:
        return 400, (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
    calls_or_results = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    if "tools_required" in quirks and calls_or_results and not body.get("tools"):
        return 400, "tools must be given when messages contain tool calls or results"
    if "reasoning_required" in quirks:
        for i, message in enumerate(messages):
            thought = message.get("reasoning_content")
            if message.get("tool_calls") and not (isinstance(thought, str) and thought):
                return 400, (
                    f"Missing `reasoning_content` field in the assistant message at message "
                    f"index {i}"
                )
    return None


def crashes(quirks: frozenset[str], body: dict[str, Any]) -> bool:
    """Whether a quirk fails on ``body`` once it has answered HTTP 200 (``no_content_crash``:
    llama-cpp-python's chat formatter reads each message's ``content`` as it streams)."""
    messages = body.get("messages")
    if "no_content_crash" not in quirks or not isinstance(messages, list):
        return False
    return any(isinstance(m, dict) and "content" not in m for m in messages)


def _validation_error(i: int) -> str:
    """What llama-cpp-python's server says of message ``i``, an assistant message whose
    content is null: pydantic's errors for each kind of message it might have been."""
    kinds = {
        "System": ("role", "literal_error", "Input should be 'system'", "'assistant'"),
        "User": ("role", "literal_error", "Input should be 'user'", "'assistant'"),
        "Assistant": ("content", "string_type", "Input should be a valid string", "None"),
        "Tool": ("role", "literal_error", "Input should be 'tool'", "'assistant'"),
        "Function": ("role", "literal_error", "Input should be 'function'", "'assistant'"),
    }
    errors = [
        f"messages.{i}.ChatCompletionRequest{kind}Message.{field}\n  {said} "
        f"[type={type_}, input_value={value}]"
        for kind, (field, type_, said, value) in kinds.items()
    ]
    return f"{len(errors)} validation errors for CreateChatCompletionRequest\n" + "\n".join(errors)


def capped(step: Step, body: dict[str, Any]) -> Step:
    """``step`` as a server honouring the chat request's output cap would answer it."""
    cap = body.get("max_tokens")
    if cap is None:
        cap = body.get("max_completion_tokens")
    return cut(step, cap)


def cut(step: Step, cap: object) -> Step:
    """``step`` cut to an output cap of ``cap`` tokens (4 characters of text each), if it is
    one: its text cut, its tool calls dropped, its finish ``"length"``."""
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0 or len(step.text) <= 4 * cap:
        return step
    return msgspec.structs.replace(
        step,
        text=step.text[: 4 * cap],
        tool_calls=[],
        finish_reason="length",
        completion_tokens=cap,
    )


def completion(
    step: Step, head: dict[str, Any], ids: list[str], usage: dict[str, Any], quirks: frozenset[str]
) -> Any:
    message: dict[str, Any] = {"role": "assistant", "refusal": None}
    message["content"] = step.text or (None if step.tool_calls else "")
    if step.reasoning:
        message[_reasoning_field(quirks)] = step.reasoning
    if step.tool_calls:
        message["tool_calls"] = _calls(step, ids, quirks)
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish(step)}
    sends_usage = step.send_usage and "no_usage" not in quirks
    return {**head, "choices": [choice], **({"usage": usage} if sends_usage else {})}


def _reasoning_field(quirks: frozenset[str]) -> str:
    return "reasoning" if "reasoning_field" in quirks else "reasoning_content"


def _calls(step: Step, ids: list[str], quirks: frozenset[str]) -> list[dict[str, Any]]:
    """The step's tool calls, whole, as the quirks shape them."""
    calls = []
    for i, (call, id_) in enumerate(zip(step.tool_calls, ids, strict=True)):
        arguments: Any = call.arguments
        if "object_arguments" in quirks:
            with contextlib.suppress(msgspec.DecodeError):
                arguments = msgspec.json.decode(call.arguments)
        entry = {"index": i, "id": id_, "type": "function"}
        entry["function"] = {"name": call.name, "arguments": arguments}
        calls.append(_without(entry, quirks))
    return calls


def _without(entry: dict[str, Any], quirks: frozenset[str]) -> dict[str, Any]:
    """A tool-call delta less the keys the quirks leave out."""
    if "no_tool_index" in quirks:
        entry.pop("index", None)
    if "no_call_id" in quirks:
        entry.pop("id", None)
    return entry


def chunks(
    step: Step,
    head: dict[str, Any],
    ids: list[str],
    usage: dict[str, Any],
    with_usage: bool,
    quirks: frozenset[str],
) -> list[dict[str, Any]]:
    with_usage = with_usage and "no_usage" not in quirks

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        # With include_usage OpenAI sends `"usage": null` on every chunk but the last.
        return {**head, "choices": [choice], **({"usage": None} if with_usage else {})}

    chunks = [chunk({"role": "assistant", "content": "", "refusal": None})]
    field = _reasoning_field(quirks)
    chunks += [chunk({field: piece}) for piece in pieces(step.reasoning, step.chunk_chars)]
    chunks += [chunk({"content": piece}) for piece in pieces(step.text, step.chunk_chars)]
    if step.failure is not None:  # as OpenAI fails a stream it has begun: one error chunk
        return [*chunks, error_body(500, step.failure)]
    if quirks & {"object_arguments", "calls_in_one_chunk"}:
        whole = _calls(step, ids, quirks)
        groups = [whole] if "calls_in_one_chunk" in quirks else [[call] for call in whole]
        chunks += [chunk({"tool_calls": group}) for group in groups if group]
    else:
        for i, (call, id_) in enumerate(zip(step.tool_calls, ids, strict=True)):
            start = {"index": i, "id": id_, "type": "function"}
            start["function"] = {"name": call.name, "arguments": ""}
            chunks.append(chunk({"tool_calls": [_without(start, quirks)]}))
            for piece in pieces(call.arguments, math.ceil(len(call.arguments) / 3)):
                more = _without({"index": i, "function": {"arguments": piece}}, quirks)
                chunks.append(chunk({"tool_calls": [more]}))
    chunks.append(chunk({}, finish(step)))
    if with_usage and step.send_usage:
        chunks.append({**head, "choices": [], "usage": usage})
    return chunks


def endless(step: Step, head: dict[str, Any], with_usage: bool) -> Iterator[dict[str, Any]]:
    """The chunks of an ``endless`` step: its text, over and over, never a finish."""
    usage = {"usage": None} if with_usage else {}

    def chunk(delta: dict[str, Any]) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**head, "choices": [choice], **usage}

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in itertools.cycle(pieces(step.text or "and so on ", step.chunk_chars)):
        yield chunk({"content": piece})
