"""What a conversation takes from outside besides the model and MCP tools: new ids, and
instruction files. Each is asked for by the tool call that needs it, so that a replay can answer
it from what the log recorded for that call (docs/replay.md#what-replay-feeds-in).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from plait.actors._text import undecodable

__all__ = ["IdFor", "NewId", "ReadInstructions", "read_instruction_file"]


class IdFor(msgspec.Struct, frozen=True):
    """What a new id is for: something a ``conv_create`` or ``conv_send`` call makes."""

    kind: Literal["conversation", "task", "continuation"]
    """The conversation ``conv_create`` opens, the task it (or ``conv_send``) runs there, or
    the continuation that answers the call."""
    task_id: str
    """The calling task."""
    call_id: str
    """The tool call."""


NewId = Callable[[IdFor], str]
"""Makes the id for what a tool call makes; the id enters the log as data."""

ReadInstructions = Callable[[IdFor, str], str]
"""Reads a ``base_instruction_file`` for a ``conv_create`` call (``IdFor.kind`` is
``conversation``): the file's text, or ``!`` and why it cannot be read."""


def read_instruction_file(workdir: str, name: str) -> str:
    """Return a file's text, or ``!reason`` when it is outside ``workdir`` or unreadable."""
    root = Path(workdir).resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        return f"!base_instruction_file {name!r} is outside the working directory"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        return f"!cannot read base_instruction_file {name!r}: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:  # refused as input is (docs/event-log.md#text)
        return f"!base_instruction_file {name!r} is not UTF-8 text ({undecodable(exc)})"
