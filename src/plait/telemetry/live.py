"""Export spans and metrics while plait runs, from the log's feed (docs/telemetry.md#live).

A thread follows the store from where it was when the runtime opened and folds each session's
events into spans as they become durable; an ended span goes to the SDK's batch processor,
whose own thread sends it. Nothing of this is on a turn's path: a backend that fails or hangs
costs a session nothing; its spans are dropped and counted, and one warning line says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from plait.events.types import Event, SessionClosed
from plait.telemetry.metrics import Metrics
from plait.telemetry.otlp import exporter, quiet, readable, require_sdk, resource
from plait.telemetry.settings import TelemetrySettings
from plait.telemetry.spans import Span, SpanBuilder

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from plait.events.store import EventStore

__all__ = ["LiveExport", "TelemetryStats"]

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
    """Spans lost: the backend failed, was too slow, or the queue was full."""


class _Counting:
    """The OTLP exporter, counting what the backend took; the first failure is one warning."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner, self.where = inner, where
        self.exported = self.failed = 0
        self.warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with quiet():
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


class LiveExport:
    """Follow ``store`` from now on; export each session's spans as their events land."""

    def __init__(self, store: EventStore, settings: TelemetrySettings, instance: str) -> None:
        """``instance``: the ``service.instance.id`` of this process's spans."""
        require_sdk()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.settings = settings
        self._store = store
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
        self._final: TelemetryStats | None = None
        self._feed = store.subscribe(store.last_position())
        self._thread = threading.Thread(target=self._run, name="plait-telemetry", daemon=True)
        self._thread.start()

    @property
    def stats(self) -> TelemetryStats:
        """What was exported so far (once closed: in all, every span not exported dropped)."""
        if self._final is not None:
            return self._final
        return TelemetryStats(self._spans, self._exporter.exported, self._exporter.failed)

    def _run(self) -> None:
        with quiet():  # the batch processor's "queue full" lines, made on this thread
            try:
                for event in self._feed:
                    self._take(event)
            except Exception as exc:  # the store closed under it, or a bug: spans stop here
                if not self._store.closed:
                    log.warning("telemetry: stopped following the log: %s", exc)

    def _take(self, event: Event) -> None:
        builder = self._builders.get(event.stream)
        if builder is None:
            builder = self._builders[event.stream] = SpanBuilder(
                event.stream, content=self._content
            )
            for earlier in self._store.read(event.stream, upto=event.seq - 1):
                builder.feed(earlier)  # exported already, or before this process: not again
        if self._metrics is not None:
            self._metrics.event(event)
        self._send(builder.feed(event))
        if isinstance(event.body, SessionClosed):  # reopened, it is folded again from its log
            self._send(self._builders.pop(event.stream).finish())

    def _send(self, spans: list[Span]) -> None:
        for made in readable(spans, self._where):
            self._processor.on_end(made)
        self._spans += len(spans)
        if self._metrics is not None:
            for span in spans:
                self._metrics.span(span)

    def close(self, timeout_sec: float = 5.0) -> TelemetryStats:
        """Export what the log holds up to now, then stop; wait at most ``timeout_sec``."""
        self._caught_up(timeout_sec)
        self._feed.close()
        self._thread.join(timeout_sec)
        for builder in self._builders.values():
            self._send(builder.finish())
        self._builders.clear()
        stopping = threading.Thread(target=self._stop, name="plait-telemetry-stop", daemon=True)
        stopping.start()
        stopping.join(timeout_sec)  # a backend that hangs is left behind, on a daemon thread
        spans, exported = self._spans, self._exporter.exported
        self._final = TelemetryStats(spans, exported, spans - exported)
        if spans > exported and not self._exporter.warned:  # said once already otherwise
            log.warning(
                "telemetry: %d of %d spans were not exported (%s was too slow)",
                spans - exported,
                spans,
                self.settings.traces_endpoint(),
            )
        return self._final

    def _caught_up(self, timeout_sec: float) -> None:
        """Wait until the feed has handed on every event stored by now."""
        last = self._store.last_position()
        done = threading.Event()
        deadline = threading.Timer(timeout_sec, done.set)
        deadline.daemon = True
        deadline.start()
        while self._feed.position < last and self._thread.is_alive() and not done.is_set():
            done.wait(0.01)
        deadline.cancel()

    def _stop(self) -> None:
        with quiet():
            self._processor.shutdown()  # type: ignore[no-untyped-call]
            if self._metrics is not None:
                self._metrics.close(EXPORT_TIMEOUT_SEC)
