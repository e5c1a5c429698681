"""JSON values as they are once decoded: the type of data plait reads from outside.

Tool arguments, an MCP result's ``_meta``, JSON schemas and history messages are typed with
these rather than ``Any``, so a reader is narrowed (``isinstance``) before it is used. A leaf
module: it imports nothing of plait's, so every wing may use it.

The aliases are ``TypeAliasType``s (PEP 695's ``type`` statement, backported): their
recursion stays inside this module, so ``typing.get_type_hints`` of a signature that uses
them works in any module, whatever it imports.
"""

from __future__ import annotations

from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonValue"]

JsonValue = TypeAliasType(
    "JsonValue", "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
)
"""A decoded JSON value: null, a boolean, a number, a string, an array or an object."""

JsonObject = TypeAliasType("JsonObject", "dict[str, JsonValue]")
"""A decoded JSON object."""
