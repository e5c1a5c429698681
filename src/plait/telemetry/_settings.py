"""Where spans and metrics go, and whether they carry content: ``[telemetry]``, the
OpenTelemetry environment variables, or the embedder's ``TelemetrySettings``
(docs/telemetry.md#settings)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

__all__ = ["TelemetrySettings"]

CONTENT_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TelemetrySettings(msgspec.Struct, frozen=True):
    """How a runtime exports its sessions' spans and metrics over OTLP; unset fields come from
    the standard ``OTEL_*`` environment variables."""

    endpoint: str | None = None
    """The OTLP/HTTP base URL (``http://collector:4318``): spans go to ``/v1/traces``, metrics
    to ``/v1/metrics``. ``None``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the signal's own
    variable); with neither, nothing is exported."""
    headers: Mapping[str, str] = {}
    """HTTP headers sent with each export (an API key), beside
    ``OTEL_EXPORTER_OTLP_HEADERS``."""
    service_name: str | None = None
    """The resource's ``service.name``; ``None``: ``OTEL_SERVICE_NAME``, else ``plait``."""
    content: bool | None = None
    """Put messages, instructions, arguments and results on the spans; ``None``:
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` turns it on. Off by default."""
    metrics: bool = True
    """Export metrics too (when spans are exported)."""
    enabled: bool = True
    """``False``: export nothing, whatever the environment says."""

    def traces_endpoint(self, env: Mapping[str, str] | None = None) -> str | None:
        """The URL spans are posted to, or ``None`` when nothing is to be exported."""
        env = os.environ if env is None else env
        if not self.enabled or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
            return None
        return self._endpoint("traces", env)

    def metrics_endpoint(self, env: Mapping[str, str] | None = None) -> str | None:
        """The URL metrics are posted to, or ``None`` when none are to be exported."""
        env = os.environ if env is None else env
        if not self.metrics or self.traces_endpoint(env) is None:
            return None
        return self._endpoint("metrics", env)

    def _endpoint(self, signal: str, env: Mapping[str, str]) -> str | None:
        """The signal's URL: the base URL given (with ``/v1/SIGNAL``), else the signal's own
        variable, else the base variable's."""
        if self.endpoint:
            return f"{self.endpoint.rstrip('/')}/v1/{signal}"
        own = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        if own:
            return own
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return f"{base.rstrip('/')}/v1/{signal}" if base else None

    def unsupported(self, env: Mapping[str, str] | None = None) -> str | None:
        """What in the environment plait cannot honour (an OTLP protocol other than
        http/protobuf, which is all the ``otel`` extra speaks); ``None``: nothing."""
        env = os.environ if env is None else env
        for name in PROTOCOL_VARS:
            protocol = env.get(name, "").strip()
            if protocol and protocol != "http/protobuf":
                return (
                    f"{name}={protocol}: plait exports OTLP over http/protobuf only; set it "
                    "to http/protobuf and give the collector's HTTP endpoint (port 4318)"
                )
        return None

    def with_content(self, env: Mapping[str, str] | None = None) -> bool:
        """Whether spans carry content."""
        if self.content is not None:
            return self.content
        env = os.environ if env is None else env
        return env.get(CONTENT_VAR, "").strip().lower() == "true"

    def service(self, env: Mapping[str, str] | None = None) -> str:
        """The resource's ``service.name``."""
        env = os.environ if env is None else env
        return self.service_name or env.get("OTEL_SERVICE_NAME") or "plait"
