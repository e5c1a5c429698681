"""Fold sessions' events into spans and metrics and hand them to the OpenTelemetry SDK, which
batches and sends them (the work of the live export's process, ``telemetry/_worker.py``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from plait.events import Event, SessionClosed
from plait.telemetry._metrics import Metrics
from plait.telemetry._otlp import exporter, readable, resource
from plait.telemetry._settings import TelemetrySettings
from plait.telemetry._span import Span
from plait.telemetry._spans import SpanBuilder

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["EXPORT_TIMEOUT_SEC", "Exporting", "TelemetryStats"]

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_SEC = 5.0
"""How long one export request may take before it counts as failed."""


class TelemetryStats(msgspec.Struct, frozen=True):
    """What a live export did."""

    spans: int
    """Spans that ended and were handed to the exporter."""
    exported: int
    """Spans the backend took."""
    dropped: int
    """Spans lost: the backend failed or was too slow."""
    unfolded: int = 0
    """Events never folded into spans: the export fell too far behind, or its process
    ended (the spans they would have ended are missing)."""


class _Counting:
    """The OTLP exporter, counting what the backend took; the first failure is one warning."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner, self.where = inner, where
        self.exported = self.failed = 0
        self.warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.inner.export(spans)
        except Exception:  # an exporter's bug must not end the batch thread
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
            if not self.warned:
                self.warned = True
                log.warning(
                    "telemetry: %s did not take %d spans; spans are dropped and counted "
                    "while it fails (docs/telemetry.md#when-the-backend-fails)",
                    self.where,
                    len(spans),
                )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class Exporting:
    """Sessions' spans and metrics on their way to ``settings``' endpoint."""

    def __init__(self, settings: TelemetrySettings, instance: str) -> None:
        """``instance``: the ``service.instance.id`` of the spans (the writing process's)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.settings = settings
        self._where = resource(settings).merge(Resource({"service.instance.id": instance}))
        endpoint = settings.traces_endpoint() or ""
        self._exporter = _Counting(exporter(settings, EXPORT_TIMEOUT_SEC), endpoint)
        self._processor = BatchSpanProcessor(self._exporter)  # type: ignore[arg-type]
        self._metrics = (
            Metrics(settings, self._where) if settings.metrics_endpoint() is not None else None
        )
        self._content = settings.with_content()
        self._builders: dict[str, SpanBuilder] = {}
        self._spans = 0

    def stats(self, unfolded: int = 0) -> TelemetryStats:
        """What was exported so far; ``unfolded``: events that never arrived here."""
        exported, failed = self._exporter.exported, self._exporter.failed
        return TelemetryStats(self._spans, exported, failed, unfolded)

    def past(self, events: Iterable[Event]) -> None:
        """Fold events recorded before this export began (exported already, or by the process
        before this one), so that what follows them ends the right spans: nothing is sent."""
        for event in events:
            self._builder(event.stream).feed(event)

    def fold(self, events: Iterable[Event]) -> None:
        """Fold events as they were recorded; send the spans they end."""
        for event in events:
            builder = self._builder(event.stream)
            if self._metrics is not None:
                self._metrics.event(event)
            self._send(builder.feed(event))
            if isinstance(event.body, SessionClosed):  # reopened, it is folded again
                self._send(self._builders.pop(event.stream).finish())

    def _builder(self, stream: str) -> SpanBuilder:
        builder = self._builders.get(stream)
        if builder is None:
            builder = self._builders[stream] = SpanBuilder(stream, content=self._content)
        return builder

    def _send(self, spans: list[Span]) -> None:
        if not spans:
            return
        for made in readable(spans, self._where):
            self._processor.on_end(made)
        self._spans += len(spans)
        if self._metrics is not None:
            for span in spans:
                self._metrics.span(span)

    def flush(self, timeout_sec: float) -> bool:
        """Send every span ended so far; return whether it was done within ``timeout_sec``."""
        return bool(self._processor.force_flush(int(timeout_sec * 1000)))

    def close(self, timeout_sec: float, unfolded: int = 0) -> TelemetryStats:
        """Send what has ended (a span a reply's usage might still join, too), then stop;
        a backend that hangs is left behind after ``timeout_sec``."""
        for builder in self._builders.values():
            self._send(builder.finish())
        self._builders.clear()
        stopping = threading.Thread(target=self._stop, name="plait-telemetry-stop", daemon=True)
        stopping.start()
        stopping.join(timeout_sec)
        spans, exported = self._spans, self._exporter.exported
        if spans > exported and not self._exporter.warned:  # said once already otherwise
            log.warning(
                "telemetry: %d of %d spans were not exported (%s was too slow)",
                spans - exported,
                spans,
                self.settings.traces_endpoint(),
            )
        return TelemetryStats(spans, exported, spans - exported, unfolded)

    def _stop(self) -> None:
        self._processor.shutdown()  # type: ignore[no-untyped-call]
        if self._metrics is not None:
            self._metrics.close(EXPORT_TIMEOUT_SEC)
