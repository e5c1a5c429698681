"""What ``SessionHandle.change_context`` asks for: the parts given, ``KEEP`` for the rest."""

from __future__ import annotations

import enum
from typing import Final, TypeVar

from plait.events import ApprovalPolicy, ContextChange, ToolPrefs, check_policy

__all__ = ["KEEP", "KeepType", "context_change"]


class KeepType(enum.Enum):
    """The type of ``KEEP``."""

    KEEP = "keep"


KEEP: Final = KeepType.KEEP
"""For ``change_context``: leave this part of the context as it is."""

T = TypeVar("T")


def context_change(
    clear_history: bool,
    *,
    base_instructions: str | KeepType | None = KEEP,
    user_instructions: str | KeepType | None = KEEP,
    mcp_allowlist: list[str] | KeepType | None = KEEP,
    tool_prefs: ToolPrefs | KeepType | None = KEEP,
    approval_policy: ApprovalPolicy | KeepType | None = KEEP,
) -> ContextChange:
    """The change of the parts given other than ``KEEP``; an approval policy checked."""
    if approval_policy is not KEEP and approval_policy is not None:
        check_policy(approval_policy)
    given = {
        "base_instructions": base_instructions,
        "user_instructions": user_instructions,
        "mcp_allowlist": mcp_allowlist,
        "tool_prefs": tool_prefs,
        "approval_policy": approval_policy,
    }
    return ContextChange(
        sorted(name for name, value in given.items() if value is not KEEP),
        base_instructions=_new(base_instructions),
        user_instructions=_new(user_instructions),
        mcp_allowlist=_new(mcp_allowlist),
        tool_prefs=_new(tool_prefs),
        clear_history=clear_history,
        approval_policy=_new(approval_policy),
    )


def _new(value: T | KeepType | None) -> T | None:
    """``value``, or ``None`` (the field's default) for ``KEEP``."""
    return None if value is KEEP else value
