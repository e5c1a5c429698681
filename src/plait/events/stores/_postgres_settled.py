"""``Settled``: how long a ``PostgresStore``'s subscriptions have been held back, and by what.

This is an internal part of ``PostgresStore``, not part of the public API.

A subscription hands out only settled events: those below the first position a transaction
still running may take (docs/event-log.md#streams-seq-and-position). While committed events
wait above that bound, it looks again soon, then less and less often. A transaction left
open holds them for as long as it runs, so once they have waited ``WARN_SEC`` the store says
which transaction it is, once for each such spell.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FIRST_LOOK_SEC", "POLL_SEC", "WARN_SEC", "Settled"]

log = logging.getLogger("plait")

POLL_SEC = 1.0
"""How often a subscription looks for appends no announcement told it of (a writer killed
between its commit and its announcement; a transaction of another kind holding rows back)."""
FIRST_LOOK_SEC = 0.02
"""How soon a subscription looks again when committed rows wait above the bound; doubled at
each look that finds them still waiting, up to ``POLL_SEC``."""
WARN_SEC = 30.0
"""How long committed rows may wait above the bound before the store says what holds them."""

HOLDER = (
    "SELECT pid, coalesce(state, ''), coalesce(application_name, ''), "
    "extract(epoch FROM now() - xact_start)::int FROM pg_stat_activity "
    "WHERE pid <> pg_backend_pid() AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) "
    "ORDER BY greatest(coalesce(age(backend_xid), 0), coalesce(age(backend_xmin), 0)) DESC "
    "LIMIT 1"
)
"""The transaction holding the oldest snapshot or id on the server: what holds the bound."""


class Settled:
    """The spell of settled reads that left committed rows above the bound, if one runs."""

    warn_sec = WARN_SEC

    def __init__(self, where: str) -> None:
        self._where = where  # the store's URL and schema, for the warning
        self._reads = 0  # settled reads in a row that left rows above the bound
        self._since: float | None = None  # (monotonic) when the spell began
        self._said = False

    def note(self, held: bool, holder: Callable[[], tuple[Any, ...] | None]) -> None:
        """Note what a settled read found; ``holder`` finds what holds the bound."""
        if not held:
            self._reads, self._since, self._said = 0, None, False
            return
        self._reads += 1
        now = time.monotonic()
        if self._since is None:
            self._since = now
        elif not self._said and now - self._since >= self.warn_sec:
            self._said = True
            self._warn(holder())

    @property
    def holding(self) -> bool:
        """Whether the last settled read left committed rows above the bound."""
        return self._reads > 0

    def poll(self) -> float:
        """How soon a subscription must look again without an announcement."""
        if not self._reads:
            return POLL_SEC
        return min(POLL_SEC, FIRST_LOOK_SEC * float(2 ** min(self._reads - 1, 16)))

    def _warn(self, found: tuple[Any, ...] | None) -> None:
        held = f"{self._where}: subscriptions wait: events committed are held back"
        if found is None:
            log.warning("%s by a transaction that has ended since", held)
            return
        pid, state, app, running = found
        log.warning(
            "%s by the transaction of server process %s (%s%s), running for %s s: they are "
            "handed out once it ends (docs/scale.md#one-server)",
            held,
            pid,
            state or "state unknown",
            f", {app}" if app else "",
            running,
        )
