"""The OpenTelemetry GenAI semantic conventions' names, and plait's values in their shapes
(docs/telemetry.md#conventions).

The names are written out here rather than imported from ``opentelemetry-semantic-conventions``:
that package marks its ``gen_ai`` constants deprecated (the conventions moved to their own
repository), and spans are built without the SDK installed (``plait trace --json`` aside).
"""

from __future__ import annotations

import json
from typing import Any

from plait.actors import BUILTIN_NAMES
from plait.events import (
    Content,
    InputImage,
    InputText,
    ModelOptions,
    ModelResponded,
    ToolCall,
    Usage,
)
from plait.events.projections import ChatMessage

__all__ = [
    "AttributeValue",
    "Attributes",
    "input_messages",
    "output_messages",
    "request_options",
    "text",
    "tool_type",
    "usage",
]

AttributeValue = str | bool | int | float | tuple[str, ...]
Attributes = dict[str, AttributeValue]

CONVENTIONS = "1.38.0"
"""The version of the GenAI semantic conventions the spans follow."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{CONVENTIONS}"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
PROVIDER_OPENAI = "openai"  # plait speaks the OpenAI Chat Completions protocol to every server
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"
SESSION_ID = "session.id"  # the general convention; tracing tools group a session's traces by it
PLAIT_TASK_ID = "plait.task.id"
PLAIT_MCP_SERVER = "plait.mcp.server"


def text(content: Content) -> str | None:
    """``content``'s text; ``None`` when it is gone (a storage policy, ``forget``, a TTL)."""
    return content if isinstance(content, str) else None


def tool_type(tool: str) -> str:
    """``gen_ai.tool.type``: ``extension`` for an MCP server's tool (``server__tool``), which
    runs outside plait, ``function`` for plait's own and function tools."""
    return "extension" if "__" in tool and tool not in BUILTIN_NAMES else "function"


def request_options(options: ModelOptions) -> Attributes:
    """The ``gen_ai.request.*`` attributes of the options a session's requests set."""
    found: Attributes = {}
    if options.max_output_tokens is not None:
        found["gen_ai.request.max_tokens"] = options.max_output_tokens
    if options.temperature is not None:
        found["gen_ai.request.temperature"] = options.temperature
    if options.top_p is not None:
        found["gen_ai.request.top_p"] = options.top_p
    if options.seed is not None:
        found["gen_ai.request.seed"] = options.seed
    if options.stop:
        found["gen_ai.request.stop_sequences"] = tuple(options.stop)
    if options.reasoning_effort is not None:
        found["openai.request.reasoning_effort"] = options.reasoning_effort
    return found


def usage(counts: Usage) -> Attributes:
    """The ``gen_ai.usage.*`` attributes of one reply's token counts."""
    found: Attributes = {
        INPUT_TOKENS: counts.prompt_tokens,
        OUTPUT_TOKENS: counts.completion_tokens,
    }
    if counts.cached_tokens:
        found[CACHE_READ_TOKENS] = counts.cached_tokens
    if counts.reasoning_tokens:
        found[REASONING_TOKENS] = counts.reasoning_tokens
    return found


def _arguments(arguments: Content) -> Any:
    raw = text(arguments)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # as the model sent it: not JSON


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call.id,
        "name": call.name,
        "arguments": _arguments(call.arguments),
    }


def _parts(content: Content | list[InputText | InputImage] | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if not isinstance(content, list):
        shown = text(content)
        return [] if shown is None else [{"type": "text", "content": shown}]
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, InputText):
            parts += _parts(part.text)
        else:  # an image: its kind, never its bytes
            parts.append({"type": "blob", "modality": "image"})
    return parts


def _message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        content = message.content
        response = None if content is None or isinstance(content, list) else text(content)
        part = {"type": "tool_call_response", "id": message.tool_call_id, "response": response}
        return {"role": "tool", "parts": [part] if response is not None else []}
    parts = _parts(message.content)
    parts += [_call_part(call) for call in message.tool_calls or ()]
    return {"role": message.role, "parts": parts}


def dumps(value: Any) -> str:
    """``value`` as compact JSON, as the conventions put structured content in one attribute."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def input_messages(history: list[ChatMessage], instructions: str | None) -> Attributes:
    """``gen_ai.input.messages`` (and ``gen_ai.system_instructions``) of a request that sent
    ``history``; messages whose content is gone keep their role and lose their parts."""
    found: Attributes = {INPUT_MESSAGES: dumps([_message(m) for m in history])}
    if instructions is not None:
        found[SYSTEM_INSTRUCTIONS] = dumps([{"type": "text", "content": instructions}])
    return found


def output_messages(reply: ModelResponded) -> Attributes:
    """``gen_ai.output.messages`` of a reply."""
    parts = _parts(reply.text) + [_call_part(call) for call in reply.tool_calls]
    message = {"role": "assistant", "parts": parts, "finish_reason": reply.finish_reason or ""}
    return {OUTPUT_MESSAGES: dumps([message])}
