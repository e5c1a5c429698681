"""How the command line says a count: ``1 tool``, ``2 tools``."""

from __future__ import annotations

__all__ = ["count"]


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, agreeing: ``count(1, "tool")`` is ``1 tool``, ``count(2,
    "tool")`` is ``2 tools`` (``plural``, where adding an ``s`` is not it)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
