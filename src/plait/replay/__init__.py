# The replay wing: deterministic replay, fork, audit.
# It imports `plait.events`, `plait.actors` and `plait.runtime`; nothing in them imports it.
"""Replay a recorded session exactly, and say where a program departs from its log."""

from plait.replay.audit import AuditRow, audit, audit_jsonl, verify
from plait.replay.fork import fork
from plait.replay.replay import Divergence, ReplayResult, replay
from plait.replay.rerun import rerun
from plait.replay.rerun_report import RerunReport, TaskReport

__all__ = [
    "AuditRow",
    "Divergence",
    "ReplayResult",
    "RerunReport",
    "TaskReport",
    "audit",
    "audit_jsonl",
    "fork",
    "replay",
    "rerun",
    "verify",
]
