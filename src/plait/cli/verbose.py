"""What ``-v`` tells while a session runs: when each of its MCP servers was ready, read from
the session's own events (``McpServerReady``, ``McpServerFailed``), so nothing in the turn
loop reports it (docs/configuration.md#seeing-what-plait-uses).

``common.py`` tells the rest: the configuration files, the store, the model and each
server's command or URL; ``-vv`` adds each model request's size and timing (``plait.model``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from plait.errors import PlaitError
from plait.events.types import Event, McpServerFailed, McpServerReady

if TYPE_CHECKING:
    from plait.actors.feed import Feed
    from plait.config import Config
    from plait.runtime import SessionHandle

__all__ = ["ServerWatch", "watch_servers"]

log = logging.getLogger("plait.cli")

MARGIN_SEC = 30.0
"""Seconds watched past the longest ``startup_timeout_sec`` (by which every server reports)."""


class ServerWatch:
    """A thread that tells when each MCP server of a session was ready or failed."""

    def __init__(
        self, feed: Feed, seen: list[Event], names: set[str], since: datetime, limit: float
    ) -> None:
        self._feed, self._names, self._since = feed, names, since
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
            while self._names:
                for item in items:
                    if isinstance(item, Event):
                        self._tell(item)
                if not self._names:
                    return
                try:
                    item = self._feed.get(timeout=max(self._deadline - time.monotonic(), 0))
                except PlaitError:  # the session is gone from this process: nothing to tell
                    return
                if item is None:
                    return
                items = [item]

    def _tell(self, event: Event) -> None:
        body = event.body
        if not isinstance(body, McpServerReady | McpServerFailed) or body.server not in self._names:
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
        self._names.discard(body.server)


def watch_servers(
    handle: SessionHandle, config: Config, since: datetime, before: int
) -> ServerWatch | None:
    """With ``-v``, tell when each enabled MCP server of the session is ready, counting from
    ``since`` (taken before the session was started or resumed), from what it records after
    seq ``before``; ``None`` without ``-v`` or servers: nothing is watched then."""
    servers = {name: s for name, s in config.mcp_servers.items() if s.enabled}
    if not servers or not log.isEnabledFor(logging.INFO):
        return None
    limit = MARGIN_SEC + max(s.startup_timeout_sec for s in servers.values())
    # Subscribed, then read: an event recorded in between is in one or both, never lost.
    feed = handle.subscribe(transient=False)
    seen = handle.runtime.store.read(handle.session_id, after=before)
    return ServerWatch(feed, seen, set(servers), since, limit)
