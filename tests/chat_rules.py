"""What strict OpenAI-compatible servers require of a Chat Completions request's messages.

OpenAI answers HTTP 400 to a request that breaks these (``An assistant message with
'tool_calls' must be followed by tool messages responding to each 'tool_call_id'``), and
stricter servers refuse a system message anywhere but first. Check a request the way they
do, on what ``ScriptedModelServer`` received. A Responses API request is read as the chat
messages its input items stand for (``chat_messages``), so the same rules hold it; the rules
of its own items (a reasoning item goes before what it led to) are ``responses_problems``.
"""

from __future__ import annotations

from typing import Any

from plait.testing import RecordedRequest

ROLES = {"system", "user", "assistant", "tool"}


def chat_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Say, one line each, where ``messages`` break the rules: a known role; the system
    message first, and only there; every tool call of an assistant message answered by
    exactly one tool message, all of them right after it, before any other message; a tool
    message only as such an answer."""
    problems: list[str] = []
    if not messages or messages[0].get("role") != "system":
        problems.append("the first message is not the system message")
    waiting: list[str] = []  # call ids of the last assistant message not yet answered
    answered: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        where = f"message {index} ({role})"
        if role not in ROLES:
            problems.append(f"{where}: unknown role")
        if role == "system" and index > 0:
            problems.append(f"{where}: a system message after the first")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in waiting:
                waiting.remove(call_id)
                answered.add(call_id)
            elif call_id in answered:
                problems.append(f"{where}: call {call_id} answered twice")
            else:
                problems.append(f"{where}: answers {call_id}, no call of the message before")
            continue
        if waiting:
            problems.append(f"{where}: calls {waiting} unanswered before it")
        calls = message.get("tool_calls") or []
        if calls and role != "assistant":
            problems.append(f"{where}: tool calls outside an assistant message")
        waiting = [call["id"] for call in calls]
        answered = set()
    if waiting:
        problems.append(f"the request ends with calls {waiting} unanswered")
    return problems


def chat_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    """The request's chat messages: as sent, or, on the Responses API, the messages its
    instructions and input items stand for (text parts joined; consecutive items of one
    assistant reply, its text and calls, as one message; reasoning items left out)."""
    if request.wire != "responses":
        return request.messages
    messages: list[dict[str, Any]] = []
    if request.instructions is not None:
        messages.append({"role": "system", "content": request.instructions})
    reply: dict[str, Any] | None = None  # the assistant message being put together
    for item in request.input:
        kind = item.get("type", "message")
        if kind == "reasoning":
            continue
        if kind == "function_call":
            if reply is None:
                reply = {"role": "assistant", "content": None}
                messages.append(reply)
            call = {"id": item["call_id"], "type": "function", "function": {}}
            call["function"] = {"name": item["name"], "arguments": item["arguments"]}
            reply.setdefault("tool_calls", []).append(call)
            continue
        if kind == "function_call_output":
            reply = None
            messages.append(
                {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
            )
            continue
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        messages.append({"role": item.get("role"), "content": content})
        reply = messages[-1] if item.get("role") == "assistant" else None
    return messages


def responses_problems(request: RecordedRequest) -> list[str]:
    """Where a Responses API request's input items break the API's own rules: a known item
    type; a reasoning item followed by the message or call it led to, not by a tool's output
    or the end; no item given by an id alone (the server keeps none: ``store`` false)."""
    problems: list[str] = []
    items = request.input
    known = {"message", "reasoning", "function_call", "function_call_output"}
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        if kind not in known:
            problems.append(f"item {index}: unknown type {kind}")
        if kind == "reasoning":
            after = items[index + 1].get("type", "message") if index + 1 < len(items) else None
            if after not in ("message", "function_call", "reasoning"):
                problems.append(f"item {index}: a reasoning item followed by {after}")
            if "id" in item and request.body.get("store") is False:
                problems.append(f"item {index}: a reasoning item's id, to a server keeping none")
            if not item.get("encrypted_content"):
                problems.append(f"item {index}: a reasoning item without encrypted_content")
    return problems


def assert_chat_valid(request: RecordedRequest) -> None:
    """Fail, naming every problem and showing the messages' roles, if a strict server would
    refuse ``request``."""
    messages = chat_messages(request)
    problems = chat_problems(messages)
    if request.wire == "responses":
        problems += responses_problems(request)
    shape = [
        (m.get("role"), m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls") or []])
        for m in messages
    ]
    assert problems == [], f"{problems}\nmessages: {shape}"
