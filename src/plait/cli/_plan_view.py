"""How a conversation's plan is shown (docs/tools.md#plan): one line a step, its status as a
marker (``[x]`` completed, ``[>]`` in progress, ``[ ]`` pending). ``plait chat`` and
``plait exec`` print it each time the model sets it, ``plait show`` each conversation's last."""

from __future__ import annotations

import argparse
from typing import TextIO

from plait.events import Event, PlanUpdated, ToolPrefs, as_text
from plait.events.projections import PlansProjection

__all__ = ["MARKERS", "plan_block", "show_plans", "tool_prefs"]

MARKERS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
"""Each step status's marker."""


def plan_block(plan: PlanUpdated, owner: str | None = None) -> str:
    """The plan as lines: a head (whose plan, why), then one line a step."""
    head = "[plan]" if owner is None else f"[plan of {owner}]"
    explanation = as_text(plan.explanation)
    if explanation:
        head += " " + " ".join(explanation.split())
    steps = [f"  {MARKERS[step.status]} {as_text(step.step)}" for step in plan.steps]
    return "\n".join([head, *(steps or ["  (no steps)"])])


def show_plans(events: list[Event], out: TextIO) -> None:
    """Print each conversation's current plan, if any conversation has one."""
    plans = PlansProjection().fold(events)
    if not plans.by_conversation:
        return
    out.write("\nplans\n")
    for cid, current in plans.by_conversation.items():
        times = "once" if current.updates == 1 else f"{current.updates} times"
        out.write(f"  {cid[:8]}  set {times}, last at seq {current.seq}\n")
        for line in plan_block(current.plan).splitlines()[1:]:
            out.write(f"  {line}\n")


def tool_prefs(args: argparse.Namespace) -> ToolPrefs | None:
    """The root's tool switches a session started by ``args``'s command begins with: the plan
    tool with ``--plan-tool`` (a resumed session keeps its own)."""
    return ToolPrefs(include_plan_tool=True) if getattr(args, "plan_tool", False) else None
