# The telemetry wing: sessions as OpenTelemetry GenAI spans and metrics, built from the log.
# It imports `plait.events` and the built-in tools' names of `plait.actors`; the SDK only to export.
"""Spans and metrics of sessions in the OpenTelemetry GenAI conventions (docs/telemetry.md)."""

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.telemetry._live import LiveExport
    from plait.telemetry._otlp import export, otlp_json, require_sdk
    from plait.telemetry._settings import TelemetrySettings
    from plait.telemetry._span import Span, SpanEvent
    from plait.telemetry._spans import SpanBuilder, spans_of

__all__ = [
    "LiveExport",
    "Span",
    "SpanBuilder",
    "SpanEvent",
    "TelemetrySettings",
    "export",
    "otlp_json",
    "require_sdk",
    "spans_of",
]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.telemetry._live": ("LiveExport",),
    "plait.telemetry._otlp": ("export", "otlp_json", "require_sdk"),
    "plait.telemetry._settings": ("TelemetrySettings",),
    "plait.telemetry._span": ("Span", "SpanEvent"),
    "plait.telemetry._spans": ("SpanBuilder", "spans_of"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
