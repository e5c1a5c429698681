"""Tool names, snapshots and tool lists: pure functions, so every run offers the same list.

A model sees an MCP tool as ``server__tool`` (docs/tools.md#names: OpenAI names must match
``^[a-zA-Z0-9_-]{1,64}$``, so no ``/``). Names that would break that rule are shortened
deterministically and the mapping is kept in the tool's snapshot. The list offered is
sorted by name; a name offered with two schemas is withheld (docs/tools.md#conflicts).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from plait._errors import ToolError
from plait.actors.mcp._config import McpServerConfig
from plait.events import McpToolSnapshot

__all__ = [
    "MAX_NAME",
    "Conflict",
    "canonical_sha256",
    "merge",
    "normalize_allowlist",
    "openai_spec",
    "qualify",
    "server_of",
    "snapshot",
    "tool_list_hash",
]

MAX_NAME: Final = 64
"""OpenAI's limit on a function name."""
SEPARATOR: Final = "__"
"""Between server and tool in a fully-qualified name."""
_VALID: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHAR: Final = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_CHARS: Final = 8


def qualify(server: str, tool: str) -> str:
    """Return the fully-qualified name ``server__tool``, shortened or sanitized if it must be.

    A name that is too long or holds other characters than ``[a-zA-Z0-9_-]`` becomes its
    sanitized prefix, ``_``, and the first 8 hex digits of the sha-256 of ``server__tool``:
    deterministic, at most 64 characters, and distinct for distinct tools in practice.
    """
    name = f"{server}{SEPARATOR}{tool}"
    if _VALID.match(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    prefix = _INVALID_CHAR.sub("_", name)[: MAX_NAME - 1 - _HASH_CHARS]
    return f"{prefix}_{digest}"


def canonical_sha256(value: object) -> str:
    """Return the hex sha-256 of ``value`` as canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(msgspec.json.encode(value, order="sorted")).hexdigest()


def snapshot(
    server: str,
    tool: str,
    *,
    description: str | None,
    input_schema: Mapping[str, object],
    annotations: Mapping[str, object] | None,
    config: McpServerConfig,
) -> McpToolSnapshot | None:
    """Return how ``tool`` of ``server`` is offered, or ``None`` if the config leaves it out.

    ``annotations`` are the MCP wire names (``readOnlyHint``...); ``read_only`` is
    ``readOnlyHint`` unless ``config.read_only_tools`` names the tool, and ``idempotent``
    is ``idempotentHint`` unless ``config.idempotent_tools`` names it.
    """
    if not config.offers(tool):
        return None
    notes = dict(annotations or {})
    hint = notes.pop("readOnlyHint", None)
    return McpToolSnapshot(
        name=qualify(server, tool),
        tool=tool,
        description=description or "",
        schema_sha256=canonical_sha256(input_schema),
        read_only=tool in config.read_only_tools or hint is True,
        annotations={
            key: value
            for key, value in sorted(notes.items())
            if value is None or isinstance(value, str | bool)
        },
        input_schema=msgspec.json.encode(input_schema).decode(),
        idempotent=tool in config.idempotent_tools or notes.get("idempotentHint") is True,
    )


class Conflict(msgspec.Struct, frozen=True):
    """One name offered by several servers with different schemas; it is withheld."""

    name: str
    """The fully-qualified name."""
    servers: list[str]
    """The servers offering it, in name order."""
    schema_sha256s: list[str]
    """Their schema hashes, in the order of ``servers``."""

    def message(self) -> str:
        """Say what is wrong, for people."""
        return (
            f"MCP tool {self.name!r} is offered by servers {' and '.join(map(repr, self.servers))} "
            "with different input schemas; it is withheld from every conversation"
        )


def merge(
    snapshots: Mapping[str, Sequence[McpToolSnapshot]],
) -> tuple[list[McpToolSnapshot], list[Conflict]]:
    """Merge the servers' tools: sorted by name, one copy per name, conflicts withheld.

    The same name with the same schema hash is kept once (from the first server by name);
    the same name with different schema hashes is left out and reported as a ``Conflict``.
    """
    offers: dict[str, list[tuple[str, McpToolSnapshot]]] = {}
    for server in sorted(snapshots):
        for tool in snapshots[server]:
            offers.setdefault(tool.name, []).append((server, tool))
    tools: list[McpToolSnapshot] = []
    conflicts: list[Conflict] = []
    for name in sorted(offers):
        offered = offers[name]
        if len({tool.schema_sha256 for _, tool in offered}) == 1:
            tools.append(offered[0][1])
        else:
            servers = sorted({server for server, _ in offered})
            hashes = [next(t.schema_sha256 for s, t in offered if s == srv) for srv in servers]
            conflicts.append(Conflict(name, servers, hashes))
    return tools, conflicts


def server_of(name: str, servers: Iterable[str]) -> str | None:
    """Return the configured server whose tools' names start like ``name``, if any.

    The longest match wins, as server names may themselves hold ``__``. A name shortened
    past 64 characters keeps its ``server__`` prefix unless the server's name is over 53.
    """
    matches = [s for s in servers if name.startswith(s + SEPARATOR)]
    return max(matches, key=len) if matches else None


def normalize_allowlist(
    entries: Iterable[str], known: Iterable[str]
) -> tuple[list[str], list[str]]:
    """Return the allowlist as sorted fully-qualified names, and deprecation warnings.

    ``server/tool`` becomes ``server__tool`` with a warning. An entry that is malformed, or
    names no tool in ``known``, raises ``ToolError`` naming it and what is wrong, so the
    caller (a model using ``conv_create``, or an embedder) can fix it.
    """
    known_names = frozenset(known)
    names: set[str] = set()
    warnings: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise ToolError(f"mcp_allowlist entry {entry!r} is not a string")
        name = entry
        if "/" in entry:
            server, _, tool = entry.partition("/")
            if not server or not tool or "/" in tool:
                raise ToolError(
                    f"mcp_allowlist entry {entry!r} is malformed: write server__tool "
                    "(the form server/tool is accepted but deprecated)"
                )
            name = qualify(server, tool)
            warnings.append(
                f"mcp_allowlist entry {entry!r} uses the deprecated form server/tool; "
                f"write {name!r}"
            )
        elif not _VALID.match(entry):
            raise ToolError(
                f"mcp_allowlist entry {entry!r} is malformed: a tool name is server__tool, "
                "1-64 characters of letters, digits, '_' and '-'"
            )
        if name not in known_names:
            hint = ", ".join(sorted(known_names)[:20]) or "none"
            raise ToolError(f"mcp_allowlist entry {entry!r}: no such MCP tool (known: {hint})")
        names.add(name)
    return sorted(names), warnings


def openai_spec(
    tool: McpToolSnapshot, input_schema: Mapping[str, object] | None = None
) -> dict[str, object]:
    """Return ``tool`` as a Chat Completions tool: ``{"type": "function", "function": ...}``.

    ``input_schema`` defaults to the one recorded in the snapshot. An object schema without
    ``properties`` gets an empty one, which some providers insist on.
    """
    schema: dict[str, object] = dict(
        input_schema
        if input_schema is not None
        else (msgspec.json.decode(tool.input_schema) if tool.input_schema else {})
    )
    schema.setdefault("type", "object")
    if schema["type"] == "object":
        schema.setdefault("properties", {})
    function: dict[str, object] = {"name": tool.name}
    if tool.description:
        function["description"] = tool.description
    function["parameters"] = schema
    return {"type": "function", "function": function}


def tool_list_hash(specs: Sequence[Mapping[str, object]]) -> str:
    """Return the hex sha-256 of a tool list exactly as offered (canonical JSON, in order)."""
    return canonical_sha256(list(specs))
