"""What each session's log takes in the store: events and bytes by type, and the blobs it
refers to, its own and shared (``plait du``, docs/storage.md#storage-you-can-see)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import msgspec

from plait.events._blobs import blob_refs
from plait.events._codec import BODY_TAGS
from plait.events._store import EventStore
from plait.events._stored import row_events

__all__ = ["SessionUsage", "TypeUsage", "usage"]


class TypeUsage(msgspec.Struct, frozen=True):
    """One event type's share of a session's log."""

    type: str
    """The body type (``ModelResponded``...)."""
    events: int
    """How many."""
    bytes: int
    """Their stored data and hashes, in bytes; where a row holds an append, its bytes shared
    by its events (a PostgreSQL store), or their bytes before compression (a SQLite store of
    layout 4)."""


class SessionUsage(msgspec.Struct, frozen=True):
    """What one session takes."""

    session_id: str
    events: int
    """Events in its log."""
    bytes: int
    """Their stored data and hashes, in bytes (the blobs apart; where a row holds an append,
    as its rows keep them, compressed)."""
    by_type: list[TypeUsage]
    """By body type, the most bytes first."""
    blobs: int
    """Distinct blobs its events refer to."""
    blob_bytes: int
    """Their content, in bytes."""
    shared_blobs: int
    """Of those, blobs another session refers to as well (deleting this session would not
    free them)."""
    shared_blob_bytes: int


def usage(store: EventStore, sessions: Sequence[str] | None = None) -> list[SessionUsage]:
    """The usage of ``sessions`` (every session by default), in the store's order; a blob is
    shared when any other session of the store refers to it."""
    every = [info.stream for info in store.streams()]
    wanted = set(every if sessions is None else sessions)
    refs: dict[str, dict[str, int]] = {}  # session -> blob sha256 -> content size
    sizes: dict[str, tuple[int, int, list[TypeUsage]]] = {}
    for stream in every:
        stored = store.as_stored(stream)
        found: dict[str, int] = {}
        by_type: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        total = events = 0
        for size, row in row_events(stored.layout, stored.rows, check=False):
            for index, event in enumerate(row):
                for ref in blob_refs(event.body):
                    found[ref.sha256] = ref.size
                name = BODY_TAGS[type(event.body)]
                # A row's bytes, shared by its events (a row per append: encoding 3).
                by_type[name] += size * (index + 1) // len(row) - size * index // len(row)
                counts[name] += 1
            total += size
            events += len(row)
        refs[stream] = found
        if stream in wanted:
            kinds = [TypeUsage(t, counts[t], n) for t, n in by_type.most_common()]
            stored_bytes = store.stored_bytes(stream)
            sizes[stream] = (events, total if stored_bytes is None else stored_bytes, kinds)
    holders: Counter[str] = Counter(sha for found in refs.values() for sha in found)
    result = []
    for stream in (s for s in every if s in wanted):
        events, size, kinds = sizes[stream]
        own = refs[stream]
        shared = {sha: n for sha, n in own.items() if holders[sha] > 1}
        result.append(
            SessionUsage(
                stream,
                events,
                size,
                kinds,
                len(own),
                sum(own.values()),
                len(shared),
                sum(shared.values()),
            )
        )
    return result
