"""One span as plait builds it from the log, before the OpenTelemetry SDK sees it, and the
ids spans take from the log's own ids (docs/telemetry.md#ids-and-times)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from plait.telemetry import _genai as genai
from plait.telemetry._genai import Attributes

__all__ = ["Span", "SpanEvent", "Status", "span_id_of", "trace_id_of"]


Status = Literal["unset", "ok", "error"]


@dataclass(slots=True)
class SpanEvent:
    """Something that happened during a span, at a recorded time."""

    name: str
    """``plait.*`` (docs/telemetry.md#what-each-event-becomes)."""
    at: datetime
    """When it was recorded."""
    attributes: Attributes = field(default_factory=dict)
    """What it carries."""


@dataclass(slots=True)
class Span:
    """One span, as plait builds it from the log; ``telemetry/_otlp.py`` hands it to OTLP."""

    name: str
    """``invoke_agent root``, ``chat gpt-4o``, ``execute_tool git__status``."""
    trace_id: int
    """128 bits, from the session and the task that began the trace."""
    span_id: int
    """64 bits, from the session and the task or call (or request seq) it stands for."""
    parent_id: int | None
    """The span it hangs under; ``None``: the trace's root."""
    kind: Literal["internal", "client"]
    """``client`` for a model request, ``internal`` for the rest."""
    start: datetime
    """The recorded time of the event that began it."""
    end: datetime | None = None
    """The recorded time of the event that ended it; ``None`` while it is open."""
    attributes: Attributes = field(default_factory=dict)
    """``gen_ai.*``, ``plait.*`` and ``error.type`` attributes."""
    events: list[SpanEvent] = field(default_factory=list)
    """Approvals, interrupts, compactions, crashes, in order."""
    status: Status = "unset"
    """``error`` for failed and cut-off work."""
    status_message: str = ""
    """Why, when ``status`` is ``error``."""
    last_at: datetime | None = None
    """The time of the latest event of its task seen (a crashed task's span ends there)."""

    def fail(self, message: str, error_type: str) -> None:
        """Mark the span failed, with ``error.type``."""
        self.status, self.status_message = "error", message
        self.attributes[genai.ERROR_TYPE] = error_type


def _id(bits: int, *parts: str) -> int:
    """A stable id of ``bits`` bits made from ``parts`` (never 0, which OTLP reads as none)."""
    digest = hashlib.sha256("\x1f".join(("plait", *parts)).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def trace_id_of(stream: str, task_id: str) -> int:
    """The trace id of the work that a task submitted from outside began."""
    return _id(128, stream, "trace", task_id)


def span_id_of(stream: str, *key: str) -> int:
    """The span id of the task, call or request ``key`` names in session ``stream``."""
    return _id(64, stream, *key)
