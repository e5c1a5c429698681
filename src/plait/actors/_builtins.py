"""The built-in tools: their wire names, JSON schemas and arguments.

The conversation tools (docs/conv-tools.md): OpenAI function names cannot contain ``.``, so on
the wire they are ``conv_create``, ``conv_send``, ``conv_list``, ``conv_history`` and
``conv_destroy``; a model that sends the dotted form (``conv.create``) is understood too. The
plan tool, ``update_plan`` (docs/tools.md#plan), is offered to a conversation whose
``include_plan_tool`` switch is on. Arguments are decoded with msgspec into the
structs below, so a bad call becomes a tool error that names the argument, never an exception.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from plait.events import InputImage, InputItem, InputText, PlanStatus, PlanStep, PlanUpdated

__all__ = [
    "BUILTIN_NAMES",
    "CONV_NAMES",
    "INTERRUPTING",
    "PLAN_TOOL",
    "READ_ONLY",
    "ConvCreate",
    "ConvDestroy",
    "ConvHistory",
    "ConvList",
    "ConvSend",
    "InternalTools",
    "UpdatePlan",
    "WireItem",
    "WireStep",
    "builtin_specs",
    "canonical_name",
    "parse_arguments",
    "plan_spec",
]


class WireItem(msgspec.Struct, frozen=True):
    """One input item as a model writes it: ``{"type": "text", "text": ...}`` or an image."""

    type: Literal["text", "input_text", "image", "input_image"]
    """``text`` or ``image`` (the ``input_`` forms are accepted too)."""
    text: str | None = None
    """The text, for a text item."""
    image_url: str | None = None
    """A ``data:`` or ``http(s)://`` URL, for an image item."""

    def to_item(self) -> InputItem:
        """Return the stored form of this item."""
        if self.type in ("image", "input_image"):
            return InputImage(self.image_url or "")
        return InputText(self.text or "")


class InternalTools(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``conv.create``'s ``internal_tools``: absent fields inherit the caller's."""

    include_plan_tool: bool | None = None
    include_apply_patch_tool: bool | None = None
    web_search_request: bool | None = None
    use_streamable_shell_tool: bool | None = None


class ConvCreate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``conv_create``: open a conversation and run its first task (interrupts)."""

    base_instruction_text: str | None = None
    base_instruction_file: str | None = None
    user_instruction: str | None = None
    items: list[WireItem] | None = None
    mcp_allowlist: list[str] | None = None
    internal_tools: InternalTools | None = None

    def problem(self) -> str | None:
        """Return what is wrong with these arguments beyond their types, if anything."""
        if self.base_instruction_text is not None and self.base_instruction_file is not None:
            return "give base_instruction_text or base_instruction_file, not both"
        if not self.user_instruction and not self.items:
            return "give user_instruction or items (at least one)"
        return None


class ConvSend(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``conv_send``: run a task in another conversation (interrupts)."""

    conversation_id: str
    text: str | None = None
    items: list[WireItem] | None = None

    def problem(self) -> str | None:
        """Return what is wrong with these arguments beyond their types, if anything."""
        return None if self.text or self.items else "give text or items (at least one)"


class ConvList(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``conv_list`` takes no arguments."""

    def problem(self) -> str | None:
        """Nothing can be wrong."""
        return None


class ConvHistory(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``conv_history``: a conversation's messages, the last ``limit``."""

    conversation_id: str
    limit: int | None = None

    def problem(self) -> str | None:
        """Return what is wrong with these arguments beyond their types, if anything."""
        return "limit must be positive" if self.limit is not None and self.limit < 1 else None


class ConvDestroy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``conv_destroy``."""

    conversation_id: str

    def problem(self) -> str | None:
        """Nothing beyond the types can be wrong."""
        return None


class WireStep(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One step of ``update_plan``'s ``plan``."""

    step: str
    """What the step is."""
    status: PlanStatus
    """``pending``, ``in_progress`` or ``completed``."""


class UpdatePlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``update_plan``: the whole plan, which replaces the one before."""

    plan: list[WireStep]
    explanation: str | None = None

    def problem(self) -> str | None:
        """Return what is wrong with these arguments beyond their types, if anything."""
        for index, step in enumerate(self.plan):
            if not step.step.strip():
                return f"`$.plan[{index}].step` is empty"
        running = [i for i, step in enumerate(self.plan) if step.status == "in_progress"]
        if len(running) > 1:
            at = ", ".join(f"`$.plan[{i}]`" for i in running)
            return f"at most one step may be in_progress, not {len(running)} ({at})"
        return None

    def updated(self, call_id: str) -> PlanUpdated:
        """The event that records this plan, set by call ``call_id``."""
        steps = [PlanStep(step.step, step.status) for step in self.plan]
        return PlanUpdated(self.explanation or "", steps, call_id)


Arguments = ConvCreate | ConvSend | ConvList | ConvHistory | ConvDestroy | UpdatePlan

PLAN_TOOL: Final = "update_plan"
"""The plan tool's name."""
_ARGUMENTS: Final[dict[str, type[Arguments]]] = {
    "conv_create": ConvCreate,
    "conv_send": ConvSend,
    "conv_list": ConvList,
    "conv_history": ConvHistory,
    "conv_destroy": ConvDestroy,
    PLAN_TOOL: UpdatePlan,
}
BUILTIN_NAMES: Final = tuple(_ARGUMENTS)
"""The built-ins in their fixed order (docs/tools.md#what-a-conversation-is-offered): no
function tool may take one of these names."""
CONV_NAMES: Final = BUILTIN_NAMES[:-1]
"""The conversation tools, offered unless the ``conversation_tools`` switch is off."""
INTERRUPTING: Final = frozenset({"conv_create", "conv_send"})
"""Built-ins that replace the running task."""
READ_ONLY: Final = frozenset({"conv_list", "conv_history"})
"""Built-ins that change nothing: a batch of them runs together."""


def canonical_name(name: str) -> str | None:
    """Return the wire name of a built-in (``conv.create`` → ``conv_create``), else ``None``."""
    wire = name.replace(".", "_", 1) if name.startswith("conv.") else name
    return wire if wire in _ARGUMENTS else None


def parse_arguments(name: str, arguments: str) -> Arguments | str:
    """Decode a built-in's JSON arguments; return them, or a message the model can act on."""
    wire = canonical_name(name)
    if wire is None:
        return f"{name} is not a built-in tool"
    try:
        parsed = msgspec.json.decode(arguments or "{}", type=_ARGUMENTS[wire])
    except msgspec.ValidationError as exc:
        return f"invalid arguments for {wire}: {exc}"
    except msgspec.DecodeError as exc:
        return f"arguments for {wire} are not valid JSON: {exc}"
    problem = parsed.problem()
    return f"invalid arguments for {wire}: {problem}" if problem else parsed


def input_items(text: str | None, items: list[WireItem] | None) -> list[InputItem]:
    """Return the stored input items for a text and/or wire items."""
    out: list[InputItem] = [InputText(text)] if text else []
    out.extend(item.to_item() for item in items or ())
    return out


_ITEMS_SCHEMA: Final[dict[str, object]] = {
    "type": "array",
    "description": "Multimodal input items.",
    "items": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["text", "image"]},
            "text": {"type": "string"},
            "image_url": {"type": "string", "description": "data: or http(s):// URL"},
        },
        "required": ["type"],
    },
}

_SPECS: Final[list[tuple[str, str, dict[str, object], list[str]]]] = [
    (
        "conv_create",
        "Create a new conversation and run its first task to completion. INTERRUPTS the current "
        "task: it resumes afterwards with this tool's result, whose last_assistant_message is "
        "the new conversation's final answer.",
        {
            "base_instruction_text": {"type": "string", "description": "Its system instructions."},
            "base_instruction_file": {
                "type": "string",
                "description": "A file with its system instructions, relative to the working "
                "directory (exclusive with base_instruction_text); default: inherit yours.",
            },
            "user_instruction": {"type": "string", "description": "Its first user message."},
            "items": _ITEMS_SCHEMA,
            "mcp_allowlist": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Fully-qualified tool names (server__tool) it may use; "
                "default: the tools you have.",
            },
            "internal_tools": {
                "type": "object",
                "properties": {
                    name: {"type": "boolean"}
                    for name in (
                        "include_plan_tool",
                        "include_apply_patch_tool",
                        "web_search_request",
                        "use_streamable_shell_tool",
                    )
                },
            },
        },
        [],
    ),
    (
        "conv_send",
        "Send a message to an existing conversation and run its task to completion. INTERRUPTS "
        "the current task: it resumes with the target's last_assistant_message.",
        {
            "conversation_id": {"type": "string"},
            "text": {"type": "string"},
            "items": _ITEMS_SCHEMA,
        },
        ["conversation_id"],
    ),
    ("conv_list", "List the conversations of this session. Does not interrupt.", {}, []),
    (
        "conv_history",
        "Read a conversation's messages (no tool calls). Does not interrupt.",
        {
            "conversation_id": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "description": "Only the last N."},
        },
        ["conversation_id"],
    ),
    (
        "conv_destroy",
        "Destroy a conversation (not the root, not one waiting in the current chain). "
        "Does not interrupt.",
        {"conversation_id": {"type": "string"}},
        ["conversation_id"],
    ),
]


_PLAN_SPEC: Final = (
    PLAN_TOOL,
    "Update your plan for the task: give the whole plan each time, every step with its "
    "status. At most one step is in_progress; mark a step completed when it is done. Use it "
    "for work of several steps, not for a single answer. Does not interrupt.",
    {
        "explanation": {"type": "string", "description": "Why the plan is as it is now."},
        "plan": {
            "type": "array",
            "description": "The steps, in order.",
            "items": {
                "type": "object",
                "properties": {
                    "step": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                },
                "required": ["step", "status"],
                "additionalProperties": False,
            },
        },
    },
    ["plan"],
)


def _spec(
    name: str, description: str, properties: dict[str, object], required: list[str]
) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def builtin_specs() -> list[dict[str, object]]:
    """Return the conversation tools as OpenAI function specs, in their fixed order."""
    return [_spec(*spec) for spec in _SPECS]


def plan_spec() -> dict[str, object]:
    """Return the plan tool as an OpenAI function spec."""
    spec: dict[str, object] = _spec(*_PLAN_SPEC)
    return spec
