"""``plait sessions``: the sessions of a store, the one active last first, each with what it is
about (its title) and what it is doing (its state), in words a user knows.

A store may hold thousands of sessions, some of thousands of events, so a listing reads little
of each: every session's last event (to order them, as ``--last`` picks one), then, for the
sessions shown only, a few events at its head (the title) and at its tail (the task in flight,
found by widening the tail until it holds a task's start or end). A whole log is folded only
where neither can tell whether tasks wait: no live owner, none handed it back idle, and no
task was cut (docs/cli.md#reading-a-session gives the figures).
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from plait.cli._output import cut
from plait.cli._style import PLAIN, Style
from plait.events import Event, SessionStarted
from plait.events.projections import Activity, ActivityProjection, rfc3339

if TYPE_CHECKING:
    from plait.events import EventStore, Lease, StreamInfo
    from plait.replay import ReplayResult

__all__ = [
    "HEAD",
    "TAIL",
    "by_activity",
    "listing",
    "live_owner",
    "live_replay_line",
    "live_state",
    "owner_label",
    "session_fields",
    "session_table",
    "tail_activity",
]

HEAD = 16
"""Events read at a session's start for its title (more, up to ``TITLE_WITHIN``, if a
session's first prompt comes later)."""
TITLE_WITHIN = 256
"""How far into a session its first prompt is looked for."""
TAIL = 32
"""Events read at a session's end first; four times as many each time they hold no task's
start or end (a task with more events than that runs)."""

_ACTIVITY = ActivityProjection()


def by_activity(store: EventStore) -> list[tuple[StreamInfo, Event]]:
    """Every session with its last event, the one active last first."""
    lasts = [
        (info, store.read(info.stream, after=info.last_seq - 1)[0]) for info in store.streams()
    ]
    return sorted(lasts, key=lambda pair: pair[1].position, reverse=True)


def listing(store: EventStore, limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The rows of ``plait sessions --json`` of the ``limit`` sessions active last (all:
    ``None``), the one active last first, and how many more sessions the store holds."""
    ranked = by_activity(store)
    shown = ranked if limit is None else ranked[:limit]
    leases = {lease.stream: lease for lease in store.leases.all()}
    commands = Counter(command.stream for command in store.inbox.commands())
    rows = [
        session_fields(store, info, last, leases.get(info.stream), commands[info.stream])
        for info, last in shown
    ]
    return rows, len(ranked) - len(shown)


def session_fields(
    store: EventStore, info: StreamInfo, last: Event, lease: Lease | None, commands: int = 0
) -> dict[str, Any]:
    """Return one row of ``plait sessions --json``: the session, its title (its first prompt
    on one line, cut at ``WIDTH`` characters), its state, and its lease: ``live`` (its owner
    runs it), ``lapsed`` (its owner stopped renewing it: any process may take it over),
    ``free`` (handed back), or ``none`` (never owned). ``commands`` is how many commands wait
    in its inbox."""
    head = store.read(info.stream, limit=HEAD)
    titled = _ACTIVITY.fold(head)
    whole = len(head) == info.last_seq  # the head is the whole log: what it says is exact
    read = len(head)
    while titled.title is None and read < min(info.last_seq, TITLE_WITHIN):
        more = store.read(info.stream, after=read, limit=read)  # twice as far each time
        _ACTIVITY.fold(more, titled)
        read += len(more)
    now = titled if whole else tail_activity(store, info.stream, info.last_seq)
    started = head[0].body if isinstance(head[0].body, SessionStarted) else None
    origin = started.forked_from if started is not None else None
    if origin is not None and info.last_seq == origin.at_seq and not now.closed:
        # The copy as it was made: what its source was doing at the cut is not the fork's
        # state; it is settled when the fork is resumed (docs/replay.md#fork).
        state, waiting_for = "forked", None
    else:
        state, waiting_for = _state(store, info, now, whole, lease, commands)
    lease_state = (
        "none" if lease is None else "live" if lease.live else "lapsed" if lease.owner else "free"
    )
    return {
        "session_id": info.stream,
        "title": None if titled.title is None else cut(titled.title),
        "state": state,
        "waiting_for": waiting_for,
        "task_id": now.running,
        "last_seq": info.last_seq,
        "last_active_at": rfc3339(last.at),
        "started_at": rfc3339(head[0].at),
        "model": started.model if started is not None else "",
        "closed": state == "closed",
        "forked_from": None
        if origin is None
        else {"session_id": origin.stream, "at_seq": origin.at_seq},
        "owner": lease.owner if lease is not None else None,
        "lease": lease_state,
        "lease_epoch": lease.epoch if lease is not None else 0,
        "lease_remaining_sec": round(max(lease.remaining_sec, 0.0), 1) if lease else 0.0,
    }


def tail_activity(store: EventStore, session: str, last_seq: int) -> Activity:
    """What ``session`` is doing, folded from the shortest tail of its log (from ``TAIL``
    events, widened fourfold) that holds a task's start or end, or from its whole log."""
    size = TAIL
    while True:
        after = max(0, last_seq - size)
        activity = _ACTIVITY.fold(store.read(session, after=after, resolve_blobs=False))
        if activity.bounded or after == 0:
            return activity
        size *= 4


def _state(
    store: EventStore,
    info: StreamInfo,
    now: Activity,
    whole: bool,
    lease: Lease | None,
    commands: int,
) -> tuple[str, str | None]:
    """The session's state (``closed``, ``running``, ``waiting``, ``crashed``, ``owned``,
    ``idle``) and, when ``waiting``, what for (``approval``, ``owner``)."""
    if now.closed:
        return "closed", None
    owner = live_owner(lease)
    if now.running is not None:
        if owner is None:
            return "crashed", None  # cut by a crash, and no process took it up yet
        return ("waiting", "approval") if now.asked else ("running", None)
    if owner is not None:
        return "owned", None
    if commands:
        return "waiting", "owner"
    if lease is None or lease.owner is not None:  # never owned, or its owner stopped
        # without handing it back: tasks may wait, queued before the tail
        if not whole:
            now = _ACTIVITY.fold(store.read(info.stream, resolve_blobs=False))
        if now.waiting:
            return "waiting", "owner"
    return "idle", None


def live_owner(lease: Lease | None) -> str | None:
    """The owner of a live lease (``None``: none, or one this machine knows is dead)."""
    if lease is None or not lease.live or lease.owner is None:
        return None
    from plait.runtime import owner_state

    return None if owner_state(lease.owner) == "dead" else lease.owner


def live_state(store: EventStore, session: str) -> dict[str, str | None] | None:
    """Who owns ``session`` now and the task it runs, ``{"owner": ..., "task_id": ...}``
    (``task_id`` ``None``: none runs); ``None`` when no live process owns it."""
    owner = live_owner(store.leases.get(session))
    if owner is None:
        return None
    running = tail_activity(store, session, store.last_seq(session)).running
    return {"owner": owner, "task_id": running}


def live_replay_line(
    session: str, result: ReplayResult, live: dict[str, str | None], growing: bool
) -> str:
    """What ``plait replay`` says of a live session: whose it is, what runs, how much of it
    was replayed, and whether more is being written (it ran a task, or grew meanwhile)."""
    task = live["task_id"]
    doing = f"running task {task[:8]}" if task is not None else "idle"
    head = f"session {session[:8]} is live (owned by {owner_label(live['owner'] or '')}, {doing})"
    if result.divergence is not None:
        return (
            f"{head}: diverged after {result.events} of the {result.total} events written so far:"
        )
    if task is not None or growing:
        more = "more are being written"
        return f"{head}: replayed its first {result.total} events, no difference; {more}"
    return f"{head}: replayed the {result.total} events written so far, no difference"


def owner_label(owner: str) -> str:
    """An owner id as people read it: ``host:pid`` of a default id
    (``host:pid:random:where.start``), ``this process`` for this one's (``/sessions`` in a
    ``plait chat``), else the id itself."""
    parts = owner.split(":")
    if len(parts) < 3 or not parts[1].isdigit():
        return owner
    if parts[0] == socket.gethostname() and int(parts[1]) == os.getpid():
        return "this process"
    return f"{parts[0]}:{parts[1]}"


def _state_words(row: dict[str, Any]) -> str:
    state = row["state"]
    if state == "waiting":
        return (
            "waiting for approval" if row["waiting_for"] == "approval" else "waiting for an owner"
        )
    if state == "owned":
        return f"owned by {owner_label(row['owner'])}"
    if state == "forked":
        return "forked, not resumed"
    return str(state)


def _paint(style: Style, state: str) -> Callable[[str], str]:
    """How a state is painted: what runs cyan, what waits yellow, a crash red, an end faint."""
    return {
        "running": style.cyan,
        "owned": style.cyan,
        "waiting": style.yellow,
        "crashed": style.red,
        "closed": style.dim,
    }.get(state, str)


HEADER = ("SESSION", "LAST ACTIVE (UTC)", "EVENTS", "STATE", "TITLE")
"""The column names of ``plait sessions``."""


def session_table(
    rows: list[dict[str, Any]],
    all_ids: Iterable[str],
    *,
    width: int,
    header: bool,
    style: Style = PLAIN,
) -> list[str]:
    """Return the lines of ``plait sessions`` for ``rows``: id (the shortest prefix of 8 or
    more characters that tells it from ``all_ids``), last activity, events, state and title,
    each line at most ``width`` characters (the title is cut); ``header`` first names the
    columns."""
    size = _prefix(list(all_ids))
    cells = [
        (
            row["session_id"][:size],
            _when(row["last_active_at"]),
            str(row["last_seq"]),
            _state_words(row),
            _title(row),
        )
        for row in rows
    ]
    widths = [max(len(c[i]) for c in [HEADER, *cells]) for i in range(4)]
    room = max(20, width - sum(widths) - 2 * 4)
    lines = []
    if header:
        names = [name.ljust(w) for name, w in zip(HEADER, widths, strict=False)]
        names[2] = HEADER[2].rjust(widths[2])
        lines.append("  ".join([*names, HEADER[4]]))
    for (sid, active, events, words, title), row in zip(cells, rows, strict=True):
        paint = _paint(style, row["state"])
        lines.append(
            f"{_pad(style.bold(sid), sid, widths[0])}  {_pad(style.dim(active), active, widths[1])}"
            f"  {events.rjust(widths[2])}  {_pad(paint(words), words, widths[3])}  "
            f"{cut(title, room)}".rstrip()
        )
    return lines


def _when(at: str) -> str:
    """An RFC 3339 time in UTC (``2026-11-25T19:38:14.2443Z``) to the second, as people read
    it: ``2026-11-25 19:38:14``."""
    return at[:19].replace("T", " ")


def _pad(painted: str, text: str, width: int) -> str:
    """``painted`` (``text`` painted) padded to ``width``, the padding left unpainted."""
    return painted + " " * (width - len(text))


def _title(row: dict[str, Any]) -> str:
    title = row["title"] if row["title"] is not None else "(no prompt yet)"
    fork = row["forked_from"]
    return f"fork of {fork['session_id'][:8]} at {fork['at_seq']}: {title}" if fork else title


def _prefix(ids: list[str]) -> int:
    """The shortest length, 8 or more, at which the ids' prefixes all differ."""
    size = 8
    while len({i[:size] for i in ids}) < len(set(ids)):
        size += 1
    return size
