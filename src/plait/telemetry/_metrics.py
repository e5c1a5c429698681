"""Metrics of a running plait, through the OpenTelemetry metrics SDK: the GenAI conventions'
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``, and plait's own
``plait.tasks``, ``plait.tool_calls`` and ``plait.events.appended`` (docs/telemetry.md#metrics).

Each is recorded from a span as it ends, or from an event as the feed hands it on: from the
log, like the spans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from plait.events import Event
from plait.telemetry import _genai as genai
from plait.telemetry._genai import Attributes, AttributeValue
from plait.telemetry._settings import TelemetrySettings
from plait.telemetry._span import Span

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.resources import Resource

__all__ = ["Metrics"]

EXPORT_EVERY_MS = 10_000
"""How often metrics are sent (the SDK's default is a minute: too slow to watch a session)."""
# The conventions' advised buckets (docs/telemetry.md#metrics).
TOKEN_BUCKETS = [4.0**n for n in range(14)]
DURATION_BUCKETS = [0.01 * 2**n for n in range(14)]
_KEPT = (genai.OPERATION, genai.PROVIDER, genai.REQUEST_MODEL, genai.RESPONSE_MODEL)


class Metrics:
    """The instruments, exported every ``EXPORT_EVERY_MS`` to ``settings``' endpoint."""

    def __init__(self, settings: TelemetrySettings, where: Resource) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        headers = dict(settings.headers) or None
        sender = OTLPMetricExporter(
            endpoint=settings.metrics_endpoint(), headers=headers, timeout=5.0
        )
        reader = PeriodicExportingMetricReader(sender, export_interval_millis=EXPORT_EVERY_MS)
        self._provider = MeterProvider(resource=where, metric_readers=[reader])
        meter = self._provider.get_meter("plait", schema_url=genai.SCHEMA_URL)
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens of each model request, by type (input, output).",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of model requests, from request to reply, as recorded.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        # Counted here and read at each export: an SDK counter's add costs more than all the
        # rest of an event's telemetry (bench/turns.py, section 1d).
        self._counts: dict[str, Counter[tuple[tuple[str, AttributeValue], ...]]] = {}
        for name, unit, description in (
            ("plait.tasks", "{task}", "Tasks that ended, by outcome."),
            ("plait.tool_calls", "{call}", "Tool calls that ended, by tool and outcome."),
            ("plait.events.appended", "{event}", "Events appended, by type."),
        ):
            counts = self._counts[name] = Counter()
            meter.create_observable_counter(
                name, [self._observer(counts)], unit=unit, description=description
            )

    @staticmethod
    def _observer(
        counts: Counter[tuple[tuple[str, AttributeValue], ...]],
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            from opentelemetry.metrics import Observation

            return [Observation(n, dict(key)) for key, n in list(counts.items())]

        return observe

    def event(self, event: Event) -> None:
        """Count an event appended."""
        key = (("plait.event.type", type(event.body).__name__),)
        self._counts["plait.events.appended"][key] += 1

    def span(self, span: Span) -> None:
        """Record what an ended span measures."""
        attributes = span.attributes
        operation = attributes.get(genai.OPERATION)
        common: Attributes = {k: attributes[k] for k in _KEPT if k in attributes}
        if genai.ERROR_TYPE in attributes:
            common[genai.ERROR_TYPE] = attributes[genai.ERROR_TYPE]
        if operation == "execute_tool":
            outcome = attributes.get("plait.tool.outcome", "aborted")
            tool = attributes.get(genai.TOOL_NAME, "")
            self._counts["plait.tool_calls"][
                ((genai.TOOL_NAME, tool), ("plait.tool.outcome", outcome))
            ] += 1
            return
        if operation == "invoke_agent":
            outcome = attributes.get(genai.ERROR_TYPE, "ok")
            self._counts["plait.tasks"][(("plait.task.outcome", outcome),)] += 1
            return
        assert span.end is not None
        self._duration.record((span.end - span.start).total_seconds(), common)
        for kind, name in (("input", genai.INPUT_TOKENS), ("output", genai.OUTPUT_TOKENS)):
            count = attributes.get(name)
            if isinstance(count, int):
                self._tokens.record(count, {**common, "gen_ai.token.type": kind})

    def close(self, timeout_sec: float) -> None:
        """Send what is recorded and stop."""
        self._provider.shutdown(timeout_millis=timeout_sec * 1000)
