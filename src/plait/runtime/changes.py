"""What ``SessionHandle.change_context`` asks for: the parts given, ``KEEP`` for the rest."""

from __future__ import annotations

import enum
from typing import Any, Final

from plait.events.values import ContextChange, check_policy

__all__ = ["KEEP", "KeepType", "context_change"]


class KeepType(enum.Enum):
    """The type of ``KEEP``."""

    KEEP = "keep"


KEEP: Final = KeepType.KEEP
"""For ``change_context``: leave this part of the context as it is."""


def context_change(clear_history: bool, **given: Any) -> ContextChange:
    """The change of the parts ``given`` other than ``KEEP``; an approval policy checked."""
    policy = given.get("approval_policy", KEEP)
    if policy is not KEEP and policy is not None:
        check_policy(policy)
    changes = {name: value for name, value in given.items() if value is not KEEP}
    return ContextChange(sorted(changes), clear_history=clear_history, **changes)
