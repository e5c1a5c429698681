"""What ``-v`` tells while a session runs: when each of its MCP servers was ready, read from
the session's own events (``McpServerReady``, ``McpServerFailed``), so nothing in the turn
loop reports it (docs/configuration.md#seeing-what-plait-uses). ``plait exec`` shows its
report the events it waits on anyway; the other faces follow the session on a thread.

``_common.py`` tells the rest: the configuration files, the store, the model and each
server's command or URL; ``-vv`` adds each model request's size and timing (``plait.model``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from plait._errors import PlaitError
from plait.events import Event, McpServerFailed, McpServerReady

if TYPE_CHECKING:
    from plait._config import Config
    from plait.actors import Feed
    from plait.runtime import SessionHandle

__all__ = ["ServerReport", "ServerWatch", "server_report", "watch_servers"]

log = logging.getLogger("plait.cli")

MARGIN_SEC = 30.0
"""Seconds watched past the longest ``startup_timeout_sec`` (by which every server reports)."""


class ServerReport:
    """Tell when each MCP server of a session was ready or failed, from the events it is
    shown: the one place that says it, whichever loop follows the session."""

    def __init__(self, names: set[str], since: datetime) -> None:
        self.waiting = names
        """The servers not told of yet as ready or failed for good."""
        self._since = since

    def later(self, names: Iterable[str]) -> None:
        """Say that the servers ``names`` start at their first call, their tools offered as
        the session's log lists them until then (docs/tools.md#started-when-needed)."""
        for name in sorted(names):
            log.info(
                "MCP server %s: its tools as the log lists them; started when first called", name
            )

    def tell(self, event: Event) -> None:
        """Log ``event`` if it is one of a waited-for server's ``McpServerReady`` or
        ``McpServerFailed``, with the milliseconds since the session was started."""
        body = event.body
        if (
            not isinstance(body, McpServerReady | McpServerFailed)
            or body.server not in self.waiting
        ):
            return
        ms = max((event.at - self._since).total_seconds() * 1000, 0)
        if isinstance(body, McpServerReady):
            log.info(
                "MCP server %s: ready after %.0f ms, %d tools", body.server, ms, len(body.tools)
            )
        elif body.retry_in_sec is None:
            log.info("MCP server %s: did not start after %.0f ms: %s", body.server, ms, body.reason)
        else:
            log.info("MCP server %s: failed after %.0f ms: %s", body.server, ms, body.reason)
            return
        self.waiting.discard(body.server)


class ServerWatch:
    """A thread that follows a session for a ``ServerReport``, for the faces that do not
    wait for the servers themselves (``plait chat``, ``plait mcp-server``)."""

    def __init__(self, feed: Feed, seen: list[Event], report: ServerReport, limit: float) -> None:
        self._feed, self._report = feed, report
        self._deadline = time.monotonic() + limit
        self._thread = threading.Thread(
            target=self._run, args=(seen,), name="plait-verbose-servers", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float = 5.0) -> None:
        """Wait until every server was told of (a short while at most)."""
        self._thread.join(timeout)

    def _run(self, seen: list[Event]) -> None:
        with self._feed:
            items: Iterable[object] = seen
            while self._report.waiting:
                for item in items:
                    if isinstance(item, Event):
                        self._report.tell(item)
                if not self._report.waiting:
                    return
                try:
                    item = self._feed.get(timeout=max(self._deadline - time.monotonic(), 0))
                except PlaitError:  # the session is gone from this process: nothing to tell
                    return
                if item is None:
                    return
                items = [item]


def server_report(config: Config, since: datetime) -> ServerReport | None:
    """With ``-v``, a report of the enabled MCP servers, counting from ``since`` (taken
    before the session was started or resumed); ``None`` without ``-v`` or servers."""
    names = {name for name, s in config.mcp_servers.items() if s.enabled}
    if not names or not log.isEnabledFor(logging.INFO):
        return None
    return ServerReport(names, since)


def watch_servers(
    handle: SessionHandle, config: Config, since: datetime, before: int
) -> ServerWatch | None:
    """With ``-v``, tell when each enabled MCP server of the session is ready, counting from
    ``since``, from what it records after seq ``before``, on a thread of its own; ``None``
    without ``-v`` or servers: nothing is watched then."""
    report = server_report(config, since)
    if report is None:
        return None
    limit = MARGIN_SEC + max(
        config.mcp_servers[name].startup_timeout_sec for name in report.waiting
    )
    report.later(handle.later_servers)
    # Subscribed, then read: an event recorded in between is in one or both, never lost.
    feed = handle.subscribe(transient=False)
    seen = handle.runtime.store.read(handle.session_id, after=before)
    return ServerWatch(feed, seen, report, limit)
