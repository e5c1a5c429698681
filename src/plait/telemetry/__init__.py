# The telemetry wing: sessions as OpenTelemetry GenAI spans and metrics, built from the log.
# It imports `plait.events` and the built-in tools' names of `plait.actors`; the SDK only to export.
"""Spans and metrics of sessions in the OpenTelemetry GenAI conventions (docs/telemetry.md)."""

from plait.faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.telemetry.live import LiveExport
    from plait.telemetry.otlp import export, otlp_json, require_sdk
    from plait.telemetry.settings import TelemetrySettings
    from plait.telemetry.span import Span, SpanEvent
    from plait.telemetry.spans import SpanBuilder, spans_of

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
    "plait.telemetry.live": ("LiveExport",),
    "plait.telemetry.otlp": ("export", "otlp_json", "require_sdk"),
    "plait.telemetry.settings": ("TelemetrySettings",),
    "plait.telemetry.span": ("Span", "SpanEvent"),
    "plait.telemetry.spans": ("SpanBuilder", "spans_of"),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
