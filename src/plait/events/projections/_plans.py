"""Each conversation's current plan: the last one its model set with ``update_plan``
(docs/tools.md#plan). ``plait show`` prints it; an embedder reads it for a progress view."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from plait.events._types import Event, PlanUpdated
from plait.events._values import UtcDateTime
from plait.events.projections._base import Projection

__all__ = ["CurrentPlan", "Plans", "PlansProjection"]


class CurrentPlan(msgspec.Struct):
    """A conversation's plan now."""

    plan: PlanUpdated
    """The last update, whole (each update replaces the plan before it)."""
    seq: int
    """Where it was recorded."""
    updated_at: UtcDateTime
    """When it was recorded."""
    updates: int = 1
    """How many times the conversation's plan was set so far."""


class Plans(msgspec.Struct):
    """State of ``PlansProjection``."""

    by_conversation: dict[str, CurrentPlan] = {}
    """Each conversation's current plan, by its id, in the order they first made one."""


class PlansProjection(Projection[Plans]):
    """Folds events into each conversation's current plan."""

    state_type = Plans

    def initial(self) -> Plans:
        return Plans()

    def handlers(self) -> dict[type[Any], Callable[[Plans, Event], None]]:
        return {PlanUpdated: _updated}


def _updated(state: Plans, event: Event) -> None:
    assert isinstance(event.body, PlanUpdated)
    cid = event.conversation_id
    if cid is None:
        return
    before = state.by_conversation.get(cid)
    updates = before.updates + 1 if before is not None else 1
    state.by_conversation[cid] = CurrentPlan(event.body, event.seq, event.at, updates)
