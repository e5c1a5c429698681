"""A conversation's plan: the steps the model set with ``update_plan`` (docs/tools.md#plan)."""

from __future__ import annotations

from typing import ClassVar, Literal

from plait.events._values import Content, Value
from plait.events.bodies._base import Body

__all__ = ["PlanStatus", "PlanStep", "PlanUpdated"]

PlanStatus = Literal["pending", "in_progress", "completed"]
"""Where a step of a plan stands."""


class PlanStep(Value, frozen=True):
    """One step of a plan."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("step",)
    step: Content
    """What the step is, in the model's words."""
    status: PlanStatus = "pending"
    """Where it stands; at most one step of a plan is ``in_progress``."""


class PlanUpdated(Body, frozen=True):
    """The model set its conversation's plan (``update_plan``): the whole plan, which replaces
    the one before."""

    BLOB_FIELDS: ClassVar[tuple[str, ...]] = ("explanation", "steps")
    explanation: Content = ""
    """Why the plan is as it is now, in the model's words (may be empty)."""
    steps: list[PlanStep] = []
    """The steps, in order."""
    call_id: str = ""
    """The ``update_plan`` call that set it."""
