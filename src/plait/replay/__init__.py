# The replay wing: deterministic replay, fork, audit.
# It imports `plait.events`, `plait.actors` and `plait.runtime`; nothing in them imports it.
"""Replay a recorded session exactly, and say where a program departs from its log."""

# Imported at once, not on first use: `audit`, `fork`, `replay` and `rerun` are named as their
# modules are, and importing such a module would put the module where the name should be.

from plait.replay._audit import AuditRow, audit, audit_jsonl, verify
from plait.replay._fork import fork
from plait.replay._replay import Divergence, ReplayResult, replay
from plait.replay._rerun import rerun, rerun_each
from plait.replay._rerun_report import FailOn, RerunReport, TaskReport

__all__ = [
    "AuditRow",
    "Divergence",
    "FailOn",
    "ReplayResult",
    "RerunReport",
    "TaskReport",
    "audit",
    "audit_jsonl",
    "fork",
    "replay",
    "rerun",
    "rerun_each",
    "verify",
]
