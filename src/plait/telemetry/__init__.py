# plait.telemetry: sessions as OpenTelemetry GenAI spans and metrics, built from the log
# (docs/telemetry.md). Imports plait.events (and the built-in tools' names of plait.actors);
# the OpenTelemetry SDK only when exporting.
"""Spans and metrics of sessions in the OpenTelemetry GenAI conventions, built from the log."""

from plait.telemetry.settings import TelemetrySettings
from plait.telemetry.span import Span, SpanEvent
from plait.telemetry.spans import SpanBuilder, spans_of

__all__ = ["Span", "SpanBuilder", "SpanEvent", "TelemetrySettings", "spans_of"]
