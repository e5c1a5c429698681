"""What ``ScriptedModelServer`` (``plait.testing``) answers on OpenAI's Responses API
(``POST /v1/responses``): each script ``Step`` as a response object, or as its stream of
events, and the errors OpenAI gives a request it cannot answer.

Pure functions of a step and a request body, as ``scripted_wire`` is for Chat Completions
(whose ``Step`` this reads: its ``reasoning`` becomes a reasoning item's summary); the HTTP
server, and the responses it keeps for ``previous_response_id``, are ``testing.py``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

from plait import _scripted_wire as wire
from plait._scripted_wire import Step

__all__ = [
    "ENCRYPTED_REASONING",
    "encrypted_reasoning",
    "endless",
    "events",
    "input_items",
    "problem",
    "usage",
]

ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""The ``include`` entry that asks for reasoning items' ``encrypted_content``."""

_ITEM_NOT_FOUND = (
    "Item with id '{}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)
"""OpenAI's words for an input item given by an id it does not keep."""


def encrypted_reasoning(step: Step) -> str:
    """The ``encrypted_content`` of ``step``'s reasoning item: opaque, and the same for the
    same reasoning text, so a test can tell that a later request sends it back."""
    return "enc_" + hashlib.sha256(step.reasoning.encode()).hexdigest()


def input_items(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The request's input items in order (a string input is one user message), or None if
    ``input`` is neither a string nor a list."""
    given = body.get("input", [])
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        return None
    return [item for item in given if isinstance(item, dict)]


def problem(
    body: dict[str, Any],
    previous: list[dict[str, Any]] | None,
    stored_item: Callable[[str], dict[str, Any] | None],
    quirks: frozenset[str] = frozenset(),
) -> tuple[int, dict[str, Any]] | None:
    """The HTTP status and error body OpenAI answers ``body`` with, if it refuses it, or a
    server with ``quirks`` would.

    ``previous`` is what the response ``previous_response_id`` names holds (its input and
    output items, and those of the responses before it), None if the server keeps no such
    response; ``stored_item`` finds a kept output item by its id.
    """
    previous_id = body.get("previous_response_id")
    if previous_id is not None and previous is None:
        message = f"Previous response with id '{previous_id}' not found."
        return 400, _refused(message, "previous_response_id", "previous_response_not_found")
    items = input_items(body)
    if items is None:
        message = "Invalid type for 'input': expected a string or an array of input items."
        return 400, _refused(message, "input", "invalid_type")
    called = {item.get("call_id") for item in previous or [] if item.get("type") == "function_call"}
    for item in items:
        kind = item.get("type")
        if kind == "reasoning" and "reasoning_text_required" in quirks:
            content = item.get("content")
            if not isinstance(content, list) or not content:
                said = "is not an array" if not isinstance(content, list) else "is empty"
                return 400, _refused(f"item['content'] {said}", "input")  # llama.cpp's words
        # An item given by its id alone must be one the server keeps (a reasoning item
        # with its encrypted content is whole without it).
        by_id = kind == "item_reference" or (
            kind == "reasoning" and not item.get("encrypted_content")
        )
        if by_id:
            kept = stored_item(str(item.get("id")))
            if kept is None:
                return 400, _refused(_ITEM_NOT_FOUND.format(item.get("id")), "input")
            item = kept
        if item.get("type") == "function_call":
            called.add(item.get("call_id"))
        elif kind == "function_call_output" and item.get("call_id") not in called:
            message = (
                f"No tool call found for function call output with call_id {item.get('call_id')}."
            )
            return 400, _refused(message, "input")
    return None


def _refused(message: str, param: str, code: str | None = None) -> dict[str, Any]:
    return wire.error_body(400, message, param=param, code=code)


def usage(step: Step, request_bytes: int) -> dict[str, Any]:
    """The step's token usage as a response reports it (the chat figures, renamed)."""
    chat = wire.usage(step, request_bytes)
    details = chat.get("completion_tokens_details", {"reasoning_tokens": 0})
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": details["reasoning_tokens"]},
        "total_tokens": chat["total_tokens"],
    }


def _response(
    head: dict[str, Any], body: dict[str, Any], status: str, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """A response object in ``status``: the request's settings echoed, as OpenAI does."""
    return {
        **head,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": None,
    }


def events(
    step: Step,
    head: dict[str, Any],
    body: dict[str, Any],
    ids: list[str],
    usage: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """The events of ``step``'s streamed answer to ``body``, numbered; the last one's
    ``response`` is the whole answer. ``head`` holds the response's ``id``, ``object``,
    ``created_at`` and ``model``; ``ids`` the tool calls' ids."""
    n = head["id"].removeprefix("resp_")
    out: list[dict[str, Any]] = []  # the events
    output: list[dict[str, Any]] = []  # the output items done
    out.append({"type": "response.created", "response": _response(head, body, "in_progress", [])})
    out.append({"type": "response.in_progress", "response": out[0]["response"]})
    if step.reasoning:
        item = {"id": f"rs_{n}", "type": "reasoning", "summary": []}
        if ENCRYPTED_REASONING in (body.get("include") or []):
            item["encrypted_content"] = encrypted_reasoning(step)
        output.append(_reasoning(out, step, item, len(output)))
    finish = wire.finish(step)
    incomplete = finish in {"length", "content_filter"}
    if step.text or not step.tool_calls or step.failure is not None:
        message = _message_item(n)
        status = "incomplete" if incomplete or step.failure is not None else "completed"
        output.append(_message(out, step, message, len(output), status))
        if step.failure is not None:
            failed = _response(head, body, "failed", output)
            failed["error"] = {"code": "server_error", "message": step.failure}
            return _numbered([*out, {"type": "response.failed", "response": failed}])
    for i, (call, call_id) in enumerate(zip(step.tool_calls, ids, strict=True)):
        item = {"id": f"fc_{n}_{i + 1}", "type": "function_call", "status": "in_progress"}
        item |= {"call_id": call_id, "name": call.name, "arguments": ""}
        output.append(_function_call(out, call.arguments, item, len(output)))
    final = _response(head, body, "incomplete" if incomplete else "completed", output)
    final["usage"] = usage
    if incomplete:
        reason = "max_output_tokens" if finish == "length" else finish
        final["incomplete_details"] = {"reason": reason}
    kind = "response.incomplete" if incomplete else "response.completed"
    return _numbered([*out, {"type": kind, "response": final}])


def _numbered(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**event, "sequence_number": i} for i, event in enumerate(out)]


def _reasoning(
    out: list[dict[str, Any]], step: Step, item: dict[str, Any], index: int
) -> dict[str, Any]:
    """Stream a reasoning item, its summary in pieces, into ``out``; return it done."""
    where = {"item_id": item["id"], "output_index": index}
    out.append({"type": "response.output_item.added", "output_index": index, "item": item})
    part = {**where, "summary_index": 0}
    empty = {"type": "summary_text", "text": ""}
    out.append({"type": "response.reasoning_summary_part.added", **part, "part": empty})
    for piece in wire.pieces(step.reasoning, step.chunk_chars):
        out.append({"type": "response.reasoning_summary_text.delta", **part, "delta": piece})
    out.append({"type": "response.reasoning_summary_text.done", **part, "text": step.reasoning})
    summary = {"type": "summary_text", "text": step.reasoning}
    out.append({"type": "response.reasoning_summary_part.done", **part, "part": summary})
    done = {**item, "summary": [summary]}
    out.append({"type": "response.output_item.done", "output_index": index, "item": done})
    return done


def _message_item(n: str) -> dict[str, Any]:
    """Response ``n``'s message, as it begins: no content yet."""
    item: dict[str, Any] = {"id": f"msg_{n}", "type": "message", "status": "in_progress"}
    return item | {"role": "assistant", "content": []}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(
    out: list[dict[str, Any]], step: Step, item: dict[str, Any], index: int, status: str
) -> dict[str, Any]:
    """Stream a message item, its text in pieces, into ``out``; return it done, in
    ``status``. A step that fails stops after its text: nothing in ``out`` says it is done."""
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    out.append({"type": "response.output_item.added", "output_index": index, "item": item})
    out.append({"type": "response.content_part.added", **where, "part": _text_part("")})
    for piece in wire.pieces(step.text, step.chunk_chars):
        out.append({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []})
    done = {**item, "status": status, "content": [_text_part(step.text)]}
    if step.failure is not None:
        return done
    text = {"type": "response.output_text.done", **where, "text": step.text, "logprobs": []}
    out.append(text)
    out.append({"type": "response.content_part.done", **where, "part": _text_part(step.text)})
    out.append({"type": "response.output_item.done", "output_index": index, "item": done})
    return done


def _function_call(
    out: list[dict[str, Any]], arguments: str, item: dict[str, Any], index: int
) -> dict[str, Any]:
    """Stream a function call, its arguments in about three pieces, into ``out``; return it
    done."""
    where = {"item_id": item["id"], "output_index": index}
    out.append({"type": "response.output_item.added", "output_index": index, "item": item})
    for piece in wire.pieces(arguments, math.ceil(len(arguments) / 3)):
        out.append({"type": "response.function_call_arguments.delta", **where, "delta": piece})
    name = item["name"]
    done_args = {"arguments": arguments, "name": name}
    out.append({"type": "response.function_call_arguments.done", **where, **done_args})
    done = {**item, "status": "completed", "arguments": arguments}
    out.append({"type": "response.output_item.done", "output_index": index, "item": done})
    return done


def endless(step: Step, head: dict[str, Any], body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of an ``endless`` step: a message whose text comes over and over, never
    done."""
    n = head["id"].removeprefix("resp_")
    item = _message_item(n)
    where: dict[str, Any] = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    response = _response(head, body, "in_progress", [])
    begun: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", **where, "part": _text_part("")},
    ]
    text = itertools.cycle(wire.pieces(step.text or "and so on ", step.chunk_chars))
    delta = {"type": "response.output_text.delta", **where, "logprobs": []}
    deltas = ({**delta, "delta": piece} for piece in text)
    for i, event in enumerate(itertools.chain(begun, deltas)):
        yield {**event, "sequence_number": i}
