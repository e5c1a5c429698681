"""The rows a ``PostgresStore`` read fetched, cut to the window it was asked for.

This is an internal part of ``PostgresStore``, not part of the public API.

A row holds an append (``plait.events.stored.Packed``), so a read fetches whole rows, decodes
and checks each, and keeps the events it was asked for: a window of a stream also fetches the
row holding the seq it starts after, whose hash the window's first event must follow.
"""

from __future__ import annotations

from plait.events.types import Event

__all__ = ["beyond", "window"]


def window(
    events: list[Event], after: int, upto: int | None, limit: int | None
) -> tuple[list[Event], bytes | None]:
    """``events`` (a stream's, in seq order) with ``after < seq <= upto``, at most ``limit``,
    and the hash of seq ``after`` if they hold it."""
    before = next((e.hash for e in events if e.seq == after), None)
    kept = [e for e in events if e.seq > after and (upto is None or e.seq <= upto)]
    return (kept if limit is None else kept[:limit]), before


def beyond(events: list[Event], position: int, limit: int | None) -> list[Event]:
    """``events`` (in position order) after ``position``, at most ``limit``."""
    kept = [e for e in events if e.position > position]
    return kept if limit is None else kept[:limit]
