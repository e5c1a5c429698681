"""The OTLP receiver decodes what the real OpenTelemetry SDK exporters send, as a backend would."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from otlp_receiver import OtlpReceiver, ReceivedSpan, ReceivedSpanEvent

RESOURCE = Resource.create({"service.name": "plait-tests"})


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def traced(receiver: OtlpReceiver, compression: Compression) -> list[ReadableSpan]:
    """Export a root span, then a parent and an error child linked to it; return them ended."""
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces", compression=compression)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("plait.tests")
    try:
        with tracer.start_as_current_span("earlier") as earlier:
            pass
        with (
            tracer.start_as_current_span("turn", kind=SpanKind.SERVER) as parent,
            tracer.start_as_current_span(
                "tool call",
                kind=SpanKind.CLIENT,
                links=[Link(earlier.get_span_context())],
                attributes={"tool": "read", "ok": False, "attempt": 3, "share": 0.25},
            ) as child,
        ):
            child.set_attribute("paths", ["a.txt", "b.txt"])
            child.set_attribute("sizes", [1, 22])
            child.add_event("retry", {"delay_s": 1.5})
            child.set_status(Status(StatusCode.ERROR, "tool failed"))
    finally:
        provider.shutdown()
    return [earlier, parent, child]  # type: ignore[list-item]  # the SDK's spans are readable


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_spans_round_trip(receiver: OtlpReceiver, compression: Compression) -> None:
    earlier, parent, child = traced(receiver, compression)
    got = {s.name: s for s in receiver.wait_for_spans(lambda spans: len(spans) == 3)}

    def hex_ids(span: ReadableSpan) -> tuple[str, str]:
        context = span.get_span_context()
        assert context is not None
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"

    trace_id, child_id = hex_ids(child)
    assert (trace_id, got["turn"].span_id) == hex_ids(parent)
    assert got["turn"].parent_span_id == "" and got["turn"].kind == 2
    assert got["tool call"] == ReceivedSpan(
        trace_id=trace_id,
        span_id=child_id,
        parent_span_id=got["turn"].span_id,
        name="tool call",
        kind=3,
        start_ns=child.start_time or 0,
        end_ns=child.end_time or 0,
        attributes={
            "tool": "read",
            "ok": False,
            "attempt": 3,
            "share": 0.25,
            "paths": ("a.txt", "b.txt"),
            "sizes": (1, 22),
        },
        events=(ReceivedSpanEvent("retry", child.events[0].timestamp, {"delay_s": 1.5}),),
        links=(hex_ids(earlier),),
        status_code=2,
        status_message="tool failed",
        resource={**RESOURCE.attributes},
        scope="plait.tests",
    )
    assert got["tool call"].resource["service.name"] == "plait-tests"
    assert got["turn"].status_code == 0 and got["earlier"].trace_id != trace_id
    assert receiver.requests == 3  # one per span: SimpleSpanProcessor exports as each ends


def test_metrics_round_trip(receiver: OtlpReceiver) -> None:
    exporter = OTLPMetricExporter(endpoint=receiver.url + "/v1/metrics")
    # Exports only when flushed: no periodic export races the assertions.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE, shutdown_on_exit=False)
    try:
        meter = provider.get_meter("plait.tests")
        latency = meter.create_histogram(
            "tool.latency", unit="s", explicit_bucket_boundaries_advisory=[1.0, 10.0]
        )
        calls = meter.create_counter("tool.calls", unit="{call}")
        for seconds in (0.5, 3.0, 4.5):
            latency.record(seconds, {"tool": "read"})
        calls.add(2, {"tool": "read"})
        calls.add(3, {"tool": "read"})
        calls.add(1, {"tool": "write"})
        assert provider.force_flush()
        points = receiver.wait_for_points(lambda ps: {p.name for p in ps} >= {"tool.latency"})
    finally:
        provider.shutdown()
    [histogram] = [p for p in points if p.name == "tool.latency"]
    assert (histogram.kind, histogram.unit, histogram.attributes) == (
        "histogram",
        "s",
        {"tool": "read"},
    )
    assert (histogram.count, histogram.sum) == (3, 8.0)
    assert (histogram.bounds, histogram.bucket_counts) == ((1.0, 10.0), (1, 2, 0))
    sums = {p.attributes["tool"]: p for p in points if p.name == "tool.calls"}
    assert {tool: p.value for tool, p in sums.items()} == {"read": 5, "write": 1}
    assert all(p.kind == "sum" and p.monotonic and p.unit == "{call}" for p in sums.values())
    assert all(p.temporality == 2 for p in points)  # the exporter's default: cumulative
    assert all(p.resource["service.name"] == "plait-tests" for p in points)
    assert {p.scope for p in points} == {"plait.tests"}


def test_a_failing_backend_fails_the_export(receiver: OtlpReceiver) -> None:
    provider = TracerProvider(shutdown_on_exit=False)
    span = provider.get_tracer("plait.tests").start_span("refused")
    span.end()
    provider.shutdown()
    # 503 is retryable; a timeout shorter than the first backoff (about 1 s) leaves one attempt.
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces", timeout=0.5)
    try:
        receiver.status = 503
        assert exporter.export([span]) is SpanExportResult.FAILURE  # type: ignore[list-item]
        assert receiver.requests >= 1 and receiver.spans() == []
        receiver.status = 200
        assert exporter.export([span]) is SpanExportResult.SUCCESS  # type: ignore[list-item]
        assert [s.name for s in receiver.spans()] == ["refused"]
    finally:
        exporter.shutdown()


def post(url: str, body: bytes, content_type: str, encoding: str = "") -> tuple[int, str, bytes]:
    headers = {"Content-Type": content_type} | ({"Content-Encoding": encoding} if encoding else {})
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


TRACE_ID, SPAN_ID, PARENT_ID = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "aa" * 8
OTLP_JSON = {
    "resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{
            "scope": {"name": "json.scope"},
            "spans": [{
                "traceId": TRACE_ID, "spanId": SPAN_ID, "parentSpanId": PARENT_ID,
                "name": "from json", "kind": 4,
                "startTimeUnixNano": "1700000000000000000",
                "endTimeUnixNano": "1700000000500000000",
                "attributes": [
                    {"key": "n", "value": {"intValue": "7"}},
                    {"key": "raw", "value": {"bytesValue": base64.b64encode(b"\x00\xff").decode()}},
                    {"key": "list", "value": {"arrayValue": {"values": [
                        {"stringValue": "x"}, {"doubleValue": 2.5},
                    ]}}},
                    {"key": "map", "value": {"kvlistValue": {"values": [
                        {"key": "inner", "value": {"boolValue": True}},
                    ]}}},
                ],
                "links": [{"traceId": TRACE_ID, "spanId": PARENT_ID}],
                "status": {"code": 1},
            }],
        }],
    }],
}  # fmt: skip


@pytest.mark.parametrize("encoding", ["", "gzip"])
def test_otlp_json_round_trips(receiver: OtlpReceiver, encoding: str) -> None:
    body = json.dumps(OTLP_JSON).encode()
    body = gzip.compress(body) if encoding else body
    url = receiver.url + "/v1/traces"
    status, content_type, answer = post(url, body, "application/json", encoding)
    assert (status, content_type) == (200, "application/json"), answer
    assert json.loads(answer) == {}
    [span] = receiver.spans()
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE_ID, SPAN_ID, PARENT_ID)
    assert (span.name, span.kind, span.status_code, span.scope) == ("from json", 4, 1, "json.scope")
    assert (span.start_ns, span.end_ns) == (1_700_000_000_000_000_000, 1_700_000_000_500_000_000)
    assert span.attributes == {
        "n": 7,
        "raw": b"\x00\xff",
        "list": ("x", 2.5),
        "map": {"inner": True},
    }
    assert span.links == ((TRACE_ID, PARENT_ID),) and span.resource == {"service.name": "svc"}


def test_unknown_paths_and_undecodable_bodies_are_refused(receiver: OtlpReceiver) -> None:
    assert post(receiver.url + "/v1/logs", b"{}", "application/json")[0] == 404
    assert post(receiver.url + "/v1/traces", b"\x01junk", "application/x-protobuf")[0] == 400
    assert post(receiver.url + "/v1/traces", b"{}", "text/plain")[0] == 415
    assert receiver.requests == 3 and receiver.spans() == []


def test_a_held_request_waits_until_released() -> None:
    answers: list[int] = []
    with OtlpReceiver() as receiver:
        receiver.hold.clear()
        body = json.dumps(OTLP_JSON).encode()
        client = threading.Thread(
            target=lambda: answers.append(
                post(receiver.url + "/v1/traces", body, "application/json")[0]
            )
        )
        client.start()
        receiver.wait_for_requests(1)
        assert receiver.spans() == [] and answers == []
    # Leaving the receiver released the request and waited for it to be answered.
    client.join(timeout=10)
    assert answers == [200] and [s.name for s in receiver.spans()] == ["from json"]
