"""plait's spans through the OpenTelemetry SDK: as its ``ReadableSpan``s, to its OTLP/HTTP
exporter, or as the OTLP JSON the protocol defines.

The SDK (``plait[otel]``) is imported here only, and only when something is exported; without
it, a ``TelemetryError`` names the extra to install.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from plait._errors import TelemetryError
from plait.telemetry import _genai as genai
from plait.telemetry._settings import TelemetrySettings
from plait.telemetry._span import Span

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import TraceFlags

__all__ = ["SCOPE", "export", "exporter", "otlp_json", "quiet", "readable", "resource"]

SCOPE = "plait"
"""The instrumentation scope of plait's spans and metrics."""
EXTRA = "pip install 'plait[otel]'"
BATCH = 512
"""Spans per OTLP request when exporting recorded sessions (the batch processor's default)."""


@contextmanager
def quiet() -> Iterator[None]:
    """Silence the SDK's own log lines while the block runs: plait says what failed, in one
    line of its own (docs/telemetry.md#when-the-backend-fails). For plait's own processes
    only (``plait trace``, the live export's): an embedder's logging is left alone."""
    sdk = logging.getLogger("opentelemetry")
    before = sdk.level
    sdk.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        sdk.setLevel(before)


def require_sdk() -> None:
    """Raise ``TelemetryError`` naming the extra when the OpenTelemetry SDK is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise TelemetryError(
            f"exporting telemetry needs the OpenTelemetry SDK and OTLP exporter: {EXTRA}"
            f" ({exc.name} is missing)"
        ) from None


def resource(settings: TelemetrySettings) -> Resource:
    """The resource plait's spans and metrics come from (``OTEL_RESOURCE_ATTRIBUTES`` joins)."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": settings.service(), "plait.version": _version()})


def _version() -> str:
    import plait  # at call time: the package's __init__ imports this wing

    return plait.__version__


def _ns(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


@functools.cache
def _constants() -> tuple[InstrumentationScope, TraceFlags, dict[str, Any], dict[str, Any]]:
    """What every span of plait's shares: made once (a live export makes spans all day)."""
    from opentelemetry import trace
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    kinds = {"internal": trace.SpanKind.INTERNAL, "client": trace.SpanKind.CLIENT}
    statuses = {
        "unset": trace.StatusCode.UNSET,
        "ok": trace.StatusCode.OK,
        "error": trace.StatusCode.ERROR,
    }
    scope = InstrumentationScope(SCOPE, _version(), genai.SCHEMA_URL)
    return scope, trace.TraceFlags(trace.TraceFlags.SAMPLED), kinds, statuses


def readable(spans: Sequence[Span], where: Resource) -> list[ReadableSpan]:
    """``spans`` as the SDK's ended spans, ready for any span exporter."""
    if not spans:
        return []
    from opentelemetry import trace
    from opentelemetry.sdk.trace import Event as SdkEvent
    from opentelemetry.sdk.trace import ReadableSpan

    scope, sampled, kinds, statuses = _constants()
    made = []
    for span in spans:
        assert span.end is not None, "only ended spans are exported"
        context = trace.SpanContext(span.trace_id, span.span_id, False, sampled)
        parent = (
            None
            if span.parent_id is None
            else trace.SpanContext(span.trace_id, span.parent_id, False, sampled)
        )
        message = span.status_message if span.status == "error" else None
        made.append(
            ReadableSpan(
                span.name,
                context,
                parent,
                where,
                dict(span.attributes),
                [SdkEvent(e.name, dict(e.attributes), _ns(e.at)) for e in span.events],
                (),
                kinds[span.kind],
                status=trace.Status(statuses[span.status], message),
                start_time=_ns(span.start),
                end_time=_ns(span.end),
                instrumentation_scope=scope,
            )
        )
    return made


def exporter(settings: TelemetrySettings, timeout_sec: float | None = None) -> SpanExporter:
    """The SDK's OTLP/HTTP span exporter, to ``settings``' endpoint."""
    require_sdk()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    headers = dict(settings.headers) or None  # None: OTEL_EXPORTER_OTLP_HEADERS
    return OTLPSpanExporter(
        endpoint=settings.traces_endpoint(), headers=headers, timeout=timeout_sec
    )


def export(spans: Sequence[Span], settings: TelemetrySettings) -> None:
    """Send ``spans`` to ``settings``' endpoint, in batches; raise ``TelemetryError`` naming
    the endpoint when the backend does not take them."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    sender = exporter(settings)
    where = resource(settings)
    try:
        with quiet():
            for start in range(0, len(spans), BATCH):
                batch = readable(spans[start : start + BATCH], where)
                if sender.export(batch) is not SpanExportResult.SUCCESS:
                    raise TelemetryError(
                        f"{settings.traces_endpoint()}: the backend did not take spans "
                        f"{start + 1}-{start + len(batch)} of {len(spans)}"
                    )
    finally:
        sender.shutdown()


def otlp_json(spans: Sequence[Span], settings: TelemetrySettings) -> dict[str, Any]:
    """``spans`` as one OTLP/JSON ``ExportTraceServiceRequest``: what ``export`` sends, in the
    protocol's JSON form (ids in hex, enums as numbers)."""
    require_sdk()
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(readable(spans, resource(settings)))
    found: dict[str, Any] = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in found.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:  # protobuf's JSON writes bytes in base64; OTLP's in hex
                        span[key] = base64.b64decode(span[key]).hex()
    return found
