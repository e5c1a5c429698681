"""An OTLP/HTTP receiver on 127.0.0.1: what the real exporters send, decoded with the protocol's
own messages, for the telemetry tests to assert on."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

T = TypeVar("T")


@dataclass(frozen=True)
class ReceivedSpanEvent:
    """One event of a received span."""

    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the backend received it; ids in lowercase hex."""

    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    name: str
    kind: int  # SpanKind's proto value: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[ReceivedSpanEvent, ...]
    links: tuple[tuple[str, str], ...]  # (trace_id, span_id)
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class ReceivedPoint:
    """One data point of a received metric: a sum's or gauge's `value`, or a histogram's rest."""

    name: str
    unit: str
    kind: str  # "histogram", "sum" or "gauge"
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    value: int | float | None = None
    count: int = 0
    sum: float = 0.0
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()  # explicit bucket boundaries: one fewer than the counts
    monotonic: bool = False  # a sum's
    temporality: int = 0  # 1 delta, 2 cumulative; 0 for a gauge


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None if which is None else getattr(value, which)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    return [
        ReceivedSpan(
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            name=span.name,
            kind=span.kind,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
            attributes=_attributes(span.attributes),
            events=tuple(
                ReceivedSpanEvent(e.name, e.time_unix_nano, _attributes(e.attributes))
                for e in span.events
            ),
            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
            status_code=span.status.code,
            status_message=span.status.message,
            resource=_attributes(resource_spans.resource.attributes),
            scope=scope_spans.scope.name,
        )
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def _points(request: ExportMetricsServiceRequest) -> list[ReceivedPoint]:
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind not in ("histogram", "sum", "gauge"):  # would fail a test, not vanish
                    raise ValueError(f"metric {metric.name!r} is a {kind}: not decoded here")
                data = getattr(metric, kind)
                for p in data.data_points:
                    if kind == "histogram":
                        shape: dict[str, Any] = dict(
                            count=p.count, sum=p.sum, bucket_counts=tuple(p.bucket_counts),
                            bounds=tuple(p.explicit_bounds),
                        )  # fmt: skip
                    else:
                        shape = {"value": getattr(p, p.WhichOneof("value") or "as_int")}
                    points.append(ReceivedPoint(
                        metric.name, metric.unit, kind, _attributes(p.attributes), resource,
                        scope_metrics.scope.name, **shape,
                        monotonic=kind == "sum" and data.is_monotonic,
                        temporality=0 if kind == "gauge" else data.aggregation_temporality,
                    ))  # fmt: skip
    return points


# OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping expects base64.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


def _ids_to_base64(node: Any) -> Any:
    if isinstance(node, list):
        return [_ids_to_base64(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: base64.b64encode(bytes.fromhex(value)).decode()
        if key in _ID_KEYS and isinstance(value, str)
        else _ids_to_base64(value)
        for key, value in node.items()
    }


_ROUTES: dict[str, tuple[type[Message], type[Message], Callable[[Any], list[Any]]]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse, _spans),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse, _points),
}
_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "": bytes,
    "identity": bytes,
    "gzip": gzip.decompress,
    "deflate": zlib.decompress,
}


def _decode(
    path: str, content_type: str, encoding: str, body: bytes
) -> tuple[int, bytes, list[Any]]:
    """Decode a request to a known path: the status and body to answer, and what it carried."""
    request_type, response_type, received = _ROUTES[path]
    decompress = _DECOMPRESS.get(encoding)
    if decompress is None or content_type not in ("application/x-protobuf", "application/json"):
        return 415, f"unsupported: {content_type!r} encoded {encoding!r}".encode(), []
    request = request_type()
    try:
        if content_type == "application/x-protobuf":
            request.ParseFromString(decompress(body))
            answer = response_type().SerializeToString()
        else:
            json_format.ParseDict(_ids_to_base64(json.loads(decompress(body))), request)
            answer = json_format.MessageToJson(response_type()).encode()
        return 200, answer, received(request)
    except (DecodeError, json_format.ParseError, ValueError, OSError, zlib.error) as error:
        return 400, f"undecodable {request_type.__name__}: {error}".encode(), []


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # handler threads are joined at server_close: none outlives it
    # (method, path, content type, content encoding, body) -> (status, body, content type)
    answer: Callable[[str, str, str, str, bytes], tuple[int, bytes, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, answer, content_type = self.server.answer(
            self.command,
            self.path,
            (self.headers.get("Content-Type") or "").split(";")[0].strip().lower(),
            (self.headers.get("Content-Encoding") or "").strip().lower(),
            body,
        )
        # A client that gave up on a held request has closed its end: nothing to tell it.
        with contextlib.suppress(ConnectionError):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass  # failures are asserted on, not written to the tests' stderr


class OtlpReceiver:
    """An OTLP/HTTP backend on a free loopback port that records the spans and points it accepts."""

    url: str
    """``http://127.0.0.1:PORT``, once entered; exporters post to its /v1/traces and /v1/metrics."""

    def __init__(self) -> None:
        self.status = 200
        """The HTTP status it answers; any but 200 refuses what arrives."""
        self.hold = threading.Event()
        """While cleared, requests wait (up to 30 s) before they are answered: a stuck backend."""
        self.hold.set()
        self.requests = 0
        """Requests received on any path, answered or not, accepted or not."""
        self._cond = threading.Condition()  # notified on each request's arrival and acceptance
        self._spans: list[ReceivedSpan] = []
        self._points: list[ReceivedPoint] = []
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> OtlpReceiver:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.answer = self._answer
        self.url = f"http://127.0.0.1:{self._httpd.server_port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.url
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self.hold.set()  # held requests finish, so their threads can be joined
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _answer(
        self, method: str, path: str, content_type: str, encoding: str, body: bytes
    ) -> tuple[int, bytes, str]:
        with self._cond:
            self.requests += 1
            self._cond.notify_all()
        self.hold.wait(30)
        if method != "POST" or path not in _ROUTES:
            return 404, b"", "text/plain"
        if self.status != 200:
            return self.status, b"", "text/plain"
        status, answer, received = _decode(path, content_type, encoding, body)
        with self._cond:
            (self._spans if path == "/v1/traces" else self._points).extend(received)
            self._cond.notify_all()
        return status, answer, content_type if status == 200 else "text/plain"

    def spans(self) -> list[ReceivedSpan]:
        """Return the spans accepted so far, in arrival order."""
        with self._cond:
            return list(self._spans)

    def points(self) -> list[ReceivedPoint]:
        """Return the metric points accepted so far, in arrival order."""
        with self._cond:
            return list(self._points)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        """Wait until `count` requests have arrived, held ones included."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.requests >= count, timeout):
                raise AssertionError(f"after {timeout} s, {self.requests} requests, not {count}")

    def wait_for_spans(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0
    ) -> list[ReceivedSpan]:
        """Wait until `done` holds for the spans accepted so far; return them."""
        return self._wait(self._spans, done, timeout, "spans")

    def wait_for_points(
        self, done: Callable[[list[ReceivedPoint]], bool], timeout: float = 10.0
    ) -> list[ReceivedPoint]:
        """Wait until `done` holds for the metric points accepted so far; return them."""
        return self._wait(self._points, done, timeout, "points")

    def _wait(
        self, items: list[T], done: Callable[[list[T]], bool], timeout: float, what: str
    ) -> list[T]:
        with self._cond:
            if not self._cond.wait_for(lambda: done(list(items)), timeout):
                names = [getattr(item, "name", "?") for item in items]
                raise AssertionError(
                    f"after {timeout} s, {len(items)} {what} in {self.requests} requests: {names}"
                )
            return list(items)


if __name__ == "__main__":
    # A receiver in a process of its own (bench/turns.py): its URL on the first line of
    # stdout, then the count of spans it took when stdin closes.
    import sys

    with OtlpReceiver() as receiver:
        print(receiver.url, flush=True)
        sys.stdin.read()
        print(len(receiver.spans()), flush=True)
