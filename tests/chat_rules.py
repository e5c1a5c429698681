"""What strict OpenAI-compatible servers require of a Chat Completions request's messages.

OpenAI answers HTTP 400 to a request that breaks these (``An assistant message with
'tool_calls' must be followed by tool messages responding to each 'tool_call_id'``), and
stricter servers refuse a system message anywhere but first. Check a request the way they
do, on what ``ScriptedModelServer`` received.
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


def assert_chat_valid(request: RecordedRequest) -> None:
    """Fail, naming every problem and showing the messages' roles, if a strict server would
    refuse ``request``."""
    problems = chat_problems(request.messages)
    shape = [
        (m.get("role"), m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls") or []])
        for m in request.messages
    ]
    assert problems == [], f"{problems}\nmessages: {shape}"
