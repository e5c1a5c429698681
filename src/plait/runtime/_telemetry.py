"""Whether a runtime exports its sessions' spans and metrics as they are recorded, and the
one line that says why not when it cannot (docs/telemetry.md#live)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from plait._errors import TelemetryError
from plait.telemetry import TelemetrySettings

if TYPE_CHECKING:
    from plait.events import EventStore
    from plait.telemetry import LiveExport

__all__ = ["live_export"]

log = logging.getLogger(__name__)


def live_export(
    store: EventStore, owner_id: str, settings: TelemetrySettings | None
) -> LiveExport | None:
    """Start exporting the sessions ``owner_id`` records in ``store`` if ``settings`` (or the
    environment) name an endpoint; without the SDK, warn once naming the extra and run
    without."""
    settings = settings or TelemetrySettings()
    if settings.traces_endpoint() is None:
        return None
    problem = settings.unsupported()
    if problem is not None:
        log.warning("telemetry: %s; sessions run without it", problem)
        return None
    try:
        from plait.telemetry import LiveExport

        return LiveExport(store, settings, owner_id)
    except TelemetryError as exc:
        log.warning("telemetry: %s; sessions run without it", exc)
        return None
