"""Retention (docs/storage.md#retention): ``prune`` removes whole sessions closed, or idle,
before a date, and keeps the proof that the store is still whole.

A session goes with its events, its head, its lease, its inbox and the blobs only it refers
to; a blob another session refers to stays. In the same transaction the store records what
went (``PrunedSession``: its head, its positions, when, by which rule), so that every read
across streams accepts the gaps it leaves and still refuses any other, and ``verify`` of a
pruned session says so and checks a witness's head of it against the record.

What is never pruned, and said so in the report: a session whose lease a live process holds;
a session forked from it while its fork stays (the fork names it as its source); a session
whose log does not verify (pruning it would destroy the evidence); and, where positions are
dense, the session holding the store's last position, since positions are given out as
``max + 1`` and a later append would take a pruned one again (it goes once another session
writes; PostgreSQL's positions, from transaction ids, never come back).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from plait._errors import CorruptEventError
from plait.events._blobs import blob_refs
from plait.events._checks import link
from plait.events._codec import GENESIS_HASH
from plait.events._pruned import PrunedSession, position_runs
from plait.events._store import EventStore, utc_now
from plait.events._stored import row_events
from plait.events._types import (
    HeadSigned,
    SessionClosed,
    SessionReopened,
    SessionResumed,
    SessionStarted,
)

__all__ = ["Kept", "PruneReport", "prune", "rule_text"]


class Kept(msgspec.Struct, frozen=True):
    """A session the rules named that was not pruned, and why."""

    session_id: str
    """The session."""
    reason: str
    """Why it stays, for people."""


class PruneReport(msgspec.Struct, frozen=True):
    """What ``prune`` removed (or, dry, would remove), what it kept, and the room it freed."""

    rule: str
    """The rules applied, as the records name them."""
    dry_run: bool
    """Nothing was changed: the report says what would go."""
    pruned: list[PrunedSession]
    """The sessions removed (dry: that would be), each as its record says."""
    kept: list[Kept]
    """The sessions the rules named that stay, each with why."""
    events: int
    """Events removed."""
    blobs: int
    """Blobs removed: those only the pruned sessions referred to."""
    shared_blobs: int
    """Blobs the pruned sessions referred to that stay, for a session that stays."""
    freed: int
    """About how many bytes the removed rows and blobs took."""
    bytes_before: int | None
    """What the store took before (``EventStore.space``; ``None`` in memory)."""
    bytes_after: int | None
    """And after, once the backend gave back what it can."""
    vacuum: str = ""
    """What to run to give the rest back ("": nothing; the file shrank)."""


def rule_text(closed_before: datetime | None, idle_before: datetime | None) -> str:
    """The rules as records name them: ``closed-before 2026-01-01T00:00:00+00:00``..."""
    rules = (("closed-before", closed_before), ("idle-before", idle_before))
    return ", ".join(_rule(name, when) for name, when in rules if when is not None)


def _rule(name: str, when: datetime) -> str:
    """One rule as a record names it."""
    return f"{name} {when.astimezone(UTC).isoformat()}"


@dataclass
class _Session:
    """What ``prune`` needs to know of one stored session."""

    stream: str
    head: tuple[int, bytes]
    positions: list[int] = field(default_factory=list)
    size: int = 0  # its rows' bytes
    refs: dict[str, int] = field(default_factory=dict)  # blob sha256 -> content size
    last_at: datetime | None = None
    closed_at: datetime | None = None
    forked_from: str | None = None
    signed: tuple[int, bytes] = (0, b"")
    damage: str = ""


def prune(
    store: EventStore,
    *,
    closed_before: datetime | None = None,
    idle_before: datetime | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> PruneReport:
    """Remove the sessions closed before ``closed_before`` (their last lifecycle event a
    ``SessionClosed`` recorded before it) and those whose last event is before
    ``idle_before``, but for those the module's docstring keeps; with ``dry_run``, only say
    what would go. Raises ``ConcurrencyError`` (nothing removed) if one moved meanwhile."""
    if closed_before is None and idle_before is None:
        raise ValueError("prune needs closed_before or idle_before")
    rule = rule_text(closed_before, idle_before)
    sessions = [_scan(store, info.stream) for info in store.streams()]
    named: dict[str, str] = {}  # stream -> the rule naming it
    for session in sessions:
        matched = _matched(session, closed_before, idle_before)
        if matched:
            named[session.stream] = matched
    kept: dict[str, str] = {}
    by_stream = {session.stream: session for session in sessions}
    for stream in list(named):
        why = _held(store, by_stream[stream])
        if why:
            kept[stream] = why
            del named[stream]
    _keep_sources_and_last(store, sessions, named, kept)
    going = [s for s in sessions if s.stream in named]
    staying = [s for s in sessions if s.stream not in named]
    held_by_others = {sha for s in staying for sha in s.refs}
    own = {sha: size for s in going for sha, size in s.refs.items() if sha not in held_by_others}
    shared = {sha for s in going for sha in s.refs if sha in held_by_others}
    at = (now or utc_now()).astimezone(UTC)
    records = [_record(s, named[s.stream], at, own) for s in going]
    before = store.space().total
    vacuum = ""
    if records and not dry_run:
        vacuum = store.pruning.remove(records, sorted(own))
    return PruneReport(
        rule,
        dry_run,
        records,
        [Kept(stream, why) for stream, why in kept.items()],
        sum(r.events for r in records),
        len(own),
        len(shared),
        sum(r.freed for r in records),
        before,
        before if dry_run else store.space().total,
        vacuum,
    )


def _scan(store: EventStore, stream: str) -> _Session:
    """Read ``stream`` as stored: its positions, bytes, blobs, times, source and signed head,
    and whether its chain holds (what is damaged is kept, as evidence)."""
    stored = store.as_stored(stream)
    head = stored.head
    session = _Session(stream, head)
    try:
        rows = list(row_events(stored.layout, stored.rows))
        link(stream, [e for _, events in rows for e in events], GENESIS_HASH)
    except CorruptEventError as exc:
        session.damage = f"its log does not verify ({exc}): kept as evidence"
        rows = list(row_events(stored.layout, stored.rows, check=False))
    events = [e for _, row in rows for e in row]
    if not session.damage and (len(events), events[-1].hash if events else GENESIS_HASH) != (
        head[0],
        head[1] if head[0] else GENESIS_HASH,
    ):
        session.damage = "its head is not its last event: kept as evidence"
    session.size = sum(size for size, _ in rows)
    for event in events:
        session.positions.append(event.position)
        body = event.body
        for ref in blob_refs(body):
            session.refs[ref.sha256] = ref.size
        if isinstance(body, SessionClosed):
            session.closed_at = event.at
        elif isinstance(body, SessionReopened | SessionResumed):
            session.closed_at = None
        elif isinstance(body, HeadSigned):
            session.signed = (body.seq, body.head_hash)
        elif isinstance(body, SessionStarted) and body.forked_from is not None:
            session.forked_from = body.forked_from.stream
    session.last_at = events[-1].at if events else None
    compressed = store.stored_bytes(stream)  # where the store does (layout 4)
    session.size = session.size if compressed is None else compressed
    return session


def _matched(
    session: _Session, closed_before: datetime | None, idle_before: datetime | None
) -> str:
    """The rule that names ``session``, if one does ("": none)."""
    closed = session.closed_at
    if closed_before is not None and closed is not None and closed < closed_before:
        return _rule("closed-before", closed_before)
    last = session.last_at
    if idle_before is not None and last is not None and last < idle_before:
        return _rule("idle-before", idle_before)
    return ""


def _held(store: EventStore, session: _Session) -> str:
    """Why ``session`` must stay whatever the others do ("": nothing keeps it)."""
    if session.damage:
        return session.damage
    lease = store.leases.get(session.stream)
    if lease is not None and lease.live:
        return f"its lease is held by {lease.owner}"
    return ""


def _keep_sources_and_last(
    store: EventStore, sessions: Sequence[_Session], named: dict[str, str], kept: dict[str, str]
) -> None:
    """Keep a session a staying fork names as its source, and the one holding the store's
    last position, until nothing more changes (keeping one may keep its own source)."""
    last = store.last_position() if store.dense_positions else None
    changed = True
    while changed:
        changed = False
        for session in sessions:
            source = session.forked_from
            if session.stream not in named and source in named:
                kept[source] = f"its fork {session.stream} stays"
                del named[source]
                changed = True
        for session in sessions:
            if session.stream in named and last in session.positions[-1:]:
                kept[session.stream] = (
                    "it holds the store's last position (positions are never given out "
                    "again): it goes once another session writes"
                )
                del named[session.stream]
                changed = True


def _record(session: _Session, rule: str, at: datetime, own: dict[str, int]) -> PrunedSession:
    """``session``'s record, removed at ``at`` by ``rule``."""
    assert session.last_at is not None  # a session named by a rule has events
    blobs = sum(size for sha, size in session.refs.items() if sha in own)
    return PrunedSession(
        session.stream,
        session.head[0],
        session.head[1],
        len(session.positions),
        position_runs(session.positions),
        session.last_at,
        at,
        rule,
        session.size + blobs,
        session.closed_at,
        *session.signed,
    )
