"""What an MCP call gives back (``CallResult``), and the checks made before one is sent.

Arguments are checked against the tool's input schema here, without the server: invalid
JSON or a schema violation becomes an ``error`` result whose text tells the model what to
fix. The check uses ``jsonschema`` (a dependency of ``mcp``), imported on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from plait._jsonvalue import JsonObject, JsonValue
from plait.actors._text import mended, mended_value
from plait.events import ContextChange

if TYPE_CHECKING:  # the SDK's types, for the checker only: importing them costs ~1 s
    from mcp_types import ContentBlock

__all__ = ["CallResult", "Outcome", "decode_arguments", "from_mcp_result", "schema_problem"]

Outcome = Literal["ok", "error", "timeout"]
"""How a call ended, as ``ToolCallCompleted.outcome`` spells it."""


class CallResult(msgspec.Struct, frozen=True):
    """The outcome of one MCP tool call, ready to record and to show the model."""

    output: str
    """The text for the model: text parts joined, else the structured content as JSON."""
    outcome: Outcome = "ok"
    """``ok``, ``error`` (the server's ``isError``, a refused or failed call) or ``timeout``."""
    images: list[tuple[str, str]] = []
    """Images returned, as ``(mime type, base64 data)``, kept as attachments."""
    duration_ms: float = 0.0
    """Wall time of the call, milliseconds (0 when it was refused before being sent)."""
    control: ContextChange | None = None
    """The context change the result's ``_meta["plait/context"]`` asks for."""

    @property
    def is_error(self) -> bool:
        """Whether the model is told the call failed."""
        return self.outcome != "ok"


def decode_arguments(tool: str, arguments: str | Mapping[str, JsonValue]) -> JsonObject | str:
    """Return the arguments as an object, or a message for the model if they are not one."""
    if not isinstance(arguments, str):
        return dict(arguments)
    try:
        decoded = msgspec.json.decode(arguments or "{}")
    except msgspec.DecodeError as exc:
        return f"arguments for {tool} are not valid JSON ({exc}); send a JSON object"
    if not isinstance(decoded, dict):
        return f"arguments for {tool} must be a JSON object, got {_json_type(decoded)}"
    return decoded


def schema_problem(tool: str, input_schema: str, arguments: Mapping[str, object]) -> str | None:
    """Return what is wrong with ``arguments`` for the schema (compact JSON), or ``None``.

    A schema that is not valid JSON Schema is not enforced: the server is the judge then.
    """
    if not input_schema:
        return None
    flat = _flat(input_schema)
    if flat is not None and flat.admits(arguments):
        return None  # most schemas are flat and most calls fit: jsonschema is slow to say so
    validator = _validator(input_schema)
    if validator is None:
        return None
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

    error = best_match(validator.iter_errors(dict(arguments)))
    if error is None:
        return None
    where = "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
    )
    at = f" at arguments{where}" if where else ""
    return f"invalid arguments for {tool}{at}: {error.message}"


class _Flat(msgspec.Struct, frozen=True):
    """A schema of the common flat shape: an object whose properties have (at most) a type."""

    properties: dict[str, tuple[str, ...]]
    """Each property's allowed JSON types (empty: any value)."""
    required: tuple[str, ...]
    """Properties that must be there."""
    closed: bool
    """No other properties are allowed (``additionalProperties: false``)."""

    def admits(self, arguments: Mapping[str, object]) -> bool:
        """Whether ``arguments`` surely fit (``False``: they do not, or it cannot tell)."""
        if any(name not in arguments for name in self.required):
            return False
        for name, value in arguments.items():
            types = self.properties.get(name)
            if types is None:
                if self.closed:
                    return False
            elif types and _json_type_of(value) not in types:
                return False
        return True


_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly"}
)
_PLAIN_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})


@functools.lru_cache(maxsize=512)
def _flat(input_schema: str) -> _Flat | None:
    """The schema as a ``_Flat``, if it is one: any other keyword, and jsonschema judges."""
    try:
        schema = msgspec.json.decode(input_schema)
    except msgspec.DecodeError:
        return None
    top = {"type", "properties", "required", "additionalProperties"}
    if not isinstance(schema, dict) or not set(schema) <= top | _ANNOTATIONS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if (
        schema.get("type", "object") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not all(isinstance(name, str) for name in required)
        or not isinstance(closed, bool)
    ):
        return None
    types: dict[str, tuple[str, ...]] = {}
    for name, sub in properties.items():
        if not isinstance(sub, dict) or not set(sub) <= {"type"} | _ANNOTATIONS:
            return None
        allowed = sub.get("type", [])
        allowed = [allowed] if isinstance(allowed, str) else allowed
        if not isinstance(allowed, list) or not set(allowed) <= _PLAIN_TYPES:
            return None
        # A number is also an integer, as JSON Schema sees it.
        types[name] = (*allowed, "integer") if "number" in allowed else tuple(allowed)
    return _Flat(types, tuple(required), not closed)


def _json_type_of(value: object) -> str:
    """The JSON type of a decoded value (a float is a ``number``, even ``1.0``: so the fast
    check leaves it to jsonschema, for which it may be an ``integer``)."""
    if isinstance(value, bool):
        return "boolean"
    return _TYPE_NAMES.get(type(value), "?")


_TYPE_NAMES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    type(None): "null",
    dict: "object",
    list: "array",
}


class _Validator(Protocol):
    """What plait uses of a ``jsonschema`` validator (the library ships no types)."""

    def iter_errors(self, instance: object) -> Iterable[object]:
        """Yield each way ``instance`` breaks the schema."""
        ...


@functools.lru_cache(maxsize=512)
def _validator(input_schema: str) -> _Validator | None:
    """Compile a schema once (compiling costs far more than validating)."""
    from jsonschema import SchemaError  # type: ignore[import-untyped]
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]

    schema = msgspec.json.decode(input_schema)
    if not isinstance(schema, dict):
        return None
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    validator: _Validator = cls(schema)
    return validator


def from_mcp_result(
    content: Sequence[ContentBlock],
    structured: object,
    is_error: bool,
    duration_ms: float,
    meta: Mapping[str, object] | None = None,
) -> CallResult:
    """Convert a ``CallToolResult``'s parts (read by attribute, so no ``mcp`` import here).

    Text parts are joined with newlines; with no text, ``structured`` becomes JSON; images
    are kept; other parts (audio, resources) are named in the text so the model knows. A
    ``plait/context`` entry in ``meta`` is a context change the tool asks for; a malformed
    one makes the call an error that says what was wrong. A lone surrogate in any text is
    recorded as U+FFFD (docs/event-log.md#text).
    """
    texts: list[str] = []
    images: list[tuple[str, str]] = []
    for part in content:
        if part.type == "text":
            texts.append(part.text)
        elif part.type == "image":
            images.append((mended(part.mime_type), mended(part.data)))
        elif part.type == "resource":
            resource = part.resource
            text = getattr(resource, "text", None)
            texts.append(text if text is not None else f"[resource {resource.uri} omitted]")
        elif part.type == "resource_link":
            texts.append(f"[resource link: {part.uri}]")
        else:
            texts.append(f"[{part.type} content omitted: {getattr(part, 'mime_type', '')}]")
    output = mended("\n".join(texts))
    if not texts and structured is not None:
        output = msgspec.json.encode(mended_value(structured)).decode()
    outcome: Outcome = "error" if is_error else "ok"
    control = context_signal(meta) if meta and CONTROL_KEY in meta and not is_error else None
    if isinstance(control, str):
        output = f"{output}\n[{control}]" if output else f"[{control}]"
        return CallResult(output, "error", images, round(duration_ms, 3))
    return CallResult(output, outcome, images, round(duration_ms, 3), control)


CONTROL_KEY = "plait/context"
"""The ``_meta`` key of a tool result that changes the calling conversation's context."""


class _Signal(msgspec.Struct, forbid_unknown_fields=True):
    base_instructions: str | None = None
    user_instructions: str | None = None
    mcp_allowlist: list[str] | None = None
    clear_history: bool = False


def context_signal(meta: Mapping[str, object]) -> ContextChange | str:
    """The context change ``meta[CONTROL_KEY]`` asks for, or what is wrong with it.

    It takes ``base_instructions``, ``user_instructions`` (added to the history after a
    cleared one, as its rebuild message), ``mcp_allowlist`` and ``clear_history``; a key it
    names changes, the others stay.
    """
    raw = mended_value(meta[CONTROL_KEY])
    try:
        signal = msgspec.convert(raw, _Signal)
    except msgspec.ValidationError as exc:
        return f"malformed {CONTROL_KEY} control signal: {exc}"
    given = raw if isinstance(raw, dict) else {}  # it is: only an object converts to a struct
    named = sorted(k for k in given if k != "clear_history")
    fields = {name: getattr(signal, name) for name in named}
    return ContextChange(named, clear_history=signal.clear_history, **fields)


def _json_type(value: object) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
