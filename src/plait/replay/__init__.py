# The replay wing: deterministic replay, fork, audit.
# It imports `plait.events`, `plait.actors` and `plait.runtime`; nothing in them imports it.
"""Replay a recorded session exactly, and say where a program departs from its log."""

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
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

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.replay._audit": ("AuditRow", "audit", "audit_jsonl", "verify"),
    "plait.replay._fork": ("fork",),
    "plait.replay._replay": ("Divergence", "ReplayResult", "replay"),
    "plait.replay._rerun": ("rerun", "rerun_each"),
    "plait.replay._rerun_report": ("FailOn", "RerunReport", "TaskReport"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
