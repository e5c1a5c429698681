"""Fork: a new session whose log is an old one's up to a seq, which then runs live.

The fork's first event is the source's ``SessionStarted`` with ``forked_from`` set; the
events after it are the source's, with their conversation and task ids and their times, so
every projection of the fork up to that point equals the source's. The source is untouched.
Resume the fork with ``Runtime.resume``: a task the cut left running ends ``crashed`` then,
its open calls answered, as after a crash, and a hand-off the cut parted from its answer is
answered from the log (``runtime/_handoffs.py``, docs/replay.md#fork).
"""

from __future__ import annotations

import uuid

import msgspec

from plait._errors import ContentUnavailableError, PlaitError, UnknownSessionError
from plait.events import (
    ContentErased,
    EventStore,
    ForkOrigin,
    NewEvent,
    Policies,
    RerunOrigin,
    SessionStarted,
    Signer,
    erased_line,
    missing_content,
)

__all__ = ["fork"]


def fork(
    store: EventStore,
    session_id: str,
    at_seq: int,
    *,
    new_session_id: str | None = None,
    signer: Signer | None = None,
    rerun: RerunOrigin | None = None,
) -> str:
    """Copy ``session_id``'s events up to ``at_seq`` into a new session; return its id.
    With ``signer``, the copy's head is signed at once: the heads it copied sign its
    source's chain, not its own (docs/event-log.md#signed-heads). ``rerun`` says the fork is
    a live rerun of its source, and against what."""
    last = store.last_seq(session_id)
    if last == 0:
        raise UnknownSessionError(session_id)
    if not 2 <= at_seq <= last:  # checked first: a seq below 1 reads nothing
        raise PlaitError(
            f"session {session_id}: cannot fork at seq {at_seq}: choose 2 to {last} "
            "(the root conversation is opened at seq 2)"
        )
    events = store.read(session_id, upto=at_seq)
    if not isinstance(events[0].body, SessionStarted):
        raise UnknownSessionError(session_id)
    missing = missing_content(events)
    if missing:
        later = store.read(session_id, after=at_seq, resolve_blobs=False)
        erased = [e for e in later if isinstance(e.body, ContentErased)]
        missing = erased_line(erased[0]) if erased else missing
        raise ContentUnavailableError(session_id, f"fork at seq {at_seq}", missing)
    # Made now, the fork recovers as new sessions do, however old its source: a cut
    # hand-off is answered, where a replay sees it (docs/replay.md#hand-offs-a-fork-cut).
    forked_from = ForkOrigin(session_id, at_seq, full_recovery=True, rerun=rerun)
    origin = msgspec.structs.replace(events[0].body, forked_from=forked_from)
    new = new_session_id or str(uuid.uuid4())
    policies = Policies(events)  # the copy keeps what its source may (a ttl's content expires)
    copied = [NewEvent(origin, at=events[0].at)]
    for e in events[1:]:
        kept = policies.shape(NewEvent(e.body, e.conversation_id, e.task_id, at=e.at))
        assert kept is not None  # missing_content refused the policies that drop events
        copied.append(kept)
    made = store.append(new, copied, 0)
    if signer is not None:
        head = signer.head(new, made[-1].seq, made[-1].hash)
        (signed,) = store.append(new, [head], made[-1].seq)
        signer.witnessed(signed)
    return new
