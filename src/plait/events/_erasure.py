"""Erasure on request (docs/storage.md#erasure): ``forget`` deletes what was said in a session,
and what its tools were given and returned, and records that it did.

A session started by this plait keeps every content string in a blob of its own
(``RecordedSettings.erasable``), apart from the events the hash chain covers: the events hold
each content's digest and size. Erasing deletes those blobs; the events, their hashes and the
heads signed over them are as they were, so ``verify`` (with signatures) still passes and the
audit still lists every call. ``ContentErased`` records who asked, why and what was erased,
first, so that a deletion is never unexplained; the store then removes the content from its
files (``EventStore.erase``: SQLite's write-ahead log and free pages, PostgreSQL's dead rows).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import msgspec

from plait._errors import ErasureError, StoreError, UnknownSessionError
from plait.events._blobs import blob_refs, inline_texts
from plait.events._signing import Signer
from plait.events._store import EventStore
from plait.events._types import (
    ContentErased,
    ConversationOpened,
    Event,
    HeadSigned,
    SessionStarted,
)
from plait.events._values import BlobRef
from plait.events.projections import TASKS

__all__ = ["Erasure", "forget"]

LEASE_SEC = 60.0
"""How long ``forget`` holds the session's lease: the append, the deletion and the scrub."""


class Erasure(msgspec.Struct, frozen=True):
    """What ``forget`` did."""

    session_id: str
    """The session."""
    seq: int
    """Its ``ContentErased``."""
    events: int
    """Events whose content was erased."""
    blobs: int
    """Blobs deleted."""
    size: int
    """Bytes of content deleted."""
    kept: int
    """Blobs kept because a conversation not erased holds them too."""
    signed: bool
    """Whether a signed head follows the ``ContentErased``."""
    again: bool = False
    """Nothing was left to erase: an earlier erasure (``seq``) did it, and the store's files
    were scrubbed again (an erasure cut short, or refused a scrub, is finished so)."""


def forget(
    store: EventStore,
    session_id: str,
    *,
    conversations: Iterable[str] = (),
    requested_by: str = "",
    reason: str = "",
    signer: Signer | None = None,
) -> Erasure:
    """Erase the content of ``session_id`` (only that of ``conversations``, if any are named):
    record ``ContentErased``, sign the head after it with ``signer``, delete the blobs and
    scrub the store's files. Refused (``ErasureError``) while another process owns the
    session, while commands wait in its inbox, or where content is inside its hashed events
    (a session started before erasure existed)."""
    events = store.read(session_id, resolve_blobs=False)
    if not events or not isinstance(events[0].body, SessionStarted):
        raise UnknownSessionError(session_id)
    named = list(dict.fromkeys(conversations))
    _check_named(session_id, events, named)
    _check_signer(session_id, events, signer)
    covered = [e for e in events if not named or e.conversation_id in named]
    _check_apart(session_id, covered)
    refs: dict[str, BlobRef] = {}
    erased_events = 0
    for event in covered:
        found = blob_refs(event.body)
        erased_events += bool(found)
        refs.update((ref.sha256, ref) for ref in found)
    # Content another conversation holds too stays for it (only when some are named).
    others = [e for e in events if e.conversation_id not in named] if named else []
    shared = {ref.sha256 for e in others for ref in blob_refs(e.body)}
    held = {sha: ref for sha, ref in refs.items() if sha not in shared}
    if refs and not any(store.blobs.get(sha) is not None for sha in held):
        return _again(store, session_id, events)
    owner = f"forget-{uuid.uuid4()}"
    lease = store.leases.acquire(session_id, owner, LEASE_SEC)
    if lease.owner != owner:
        raise ErasureError(
            session_id, f"another process owns it ({lease.owner}): stop it or wait until it is idle"
        )
    try:
        waiting = store.inbox.commands(session_id)
        if waiting:
            raise ErasureError(
                session_id, f"{len(waiting)} commands wait in its inbox: let its owner take them"
            )
        last = events[-1]
        body = ContentErased(
            last.seq,
            named,
            requested_by,
            reason,
            erased_events,
            len(held),
            sum(ref.size for ref in held.values()),
            len(refs) - len(held),
        )
        (recorded,) = store.append(session_id, [body], last.seq, epoch=lease.epoch)
        if signer is not None:
            head = signer.head(session_id, recorded.seq, recorded.hash)
            (signed,) = store.append(session_id, [head], recorded.seq, epoch=lease.epoch)
            signer.witnessed(signed)
        store.blobs.erase(held)
    finally:
        idle = TASKS.fold(events)
        store.leases.release(
            session_id, owner, lease.epoch, idle=idle.running is None and not idle.pending
        )
    return Erasure(
        session_id, recorded.seq, body.events, body.blobs, body.size, body.kept, signer is not None
    )


def _again(store: EventStore, session_id: str, events: Sequence[Event]) -> Erasure:
    """The content is gone already: scrub the store's files again, and say when it went."""
    problem = store.blobs.scrub()
    if problem is not None:
        raise StoreError(problem)
    seq = max((e.seq for e in events if isinstance(e.body, ContentErased)), default=0)
    return Erasure(session_id, seq, 0, 0, 0, 0, False, again=True)


def _check_named(session_id: str, events: Sequence[Event], named: list[str]) -> None:
    opened = {e.conversation_id for e in events if isinstance(e.body, ConversationOpened)}
    for cid in named:
        if cid not in opened:
            raise ErasureError(session_id, f"it has no conversation {cid}")


def _check_signer(session_id: str, events: Sequence[Event], signer: Signer | None) -> None:
    """Refuse to erase a signed session but with its key: an erasure no signed head covers
    is what an insider deleting content would leave, and ``verify`` says so."""
    keys = {e.body.fingerprint for e in events if isinstance(e.body, HeadSigned)}
    if keys and (signer is None or signer.fingerprint not in keys):
        given = "no signing key" if signer is None else f"key {signer.fingerprint[:16]}"
        raise ErasureError(
            session_id,
            f"it is signed by key {', '.join(sorted(k[:16] for k in keys))} and {given} was "
            "given: erase it with its key ([audit] signing_key), so that the erasure is "
            "signed too",
        )


def _check_apart(session_id: str, covered: Sequence[Event]) -> None:
    """Refuse when content to erase is inside a hashed event: erasing it would break the chain."""
    for event in covered:
        if inline_texts(event.body):
            raise ErasureError(
                session_id,
                f"seq {event.seq} ({type(event.body).__name__}) holds its content inside the "
                "event the hash chain covers (the session was started before plait kept "
                "content apart): erasing it would break the chain",
            )
