"""``Verification``: what ``verify`` found of one stream (``plait verify`` prints it)."""

from __future__ import annotations

import msgspec

from plait.events._pruned import PrunedSession
from plait.events._signing import Signatures

__all__ = ["Verification"]


class Verification(msgspec.Struct, frozen=True):
    """What ``verify`` found walking a stream's hash chain and blob references."""

    stream: str
    """The stream walked."""
    ok: bool
    """True when nothing was found edited, missing or out of place."""
    events: int
    """Events checked."""
    first_bad_seq: int | None = None
    """The first seq where a check failed."""
    reason: str = ""
    """What failed there, for people."""
    blobs: int = 0
    """Blob references checked."""
    redacted: int = 0
    """Blob references whose content was deleted as its conversation's ``ttl`` storage policy
    allows, or erased on request (``ContentErased``): not an error; any other deletion is."""
    signatures: Signatures | None = None
    """What the session's signed heads (and the witness, given a key) say, once its chain is
    found intact (docs/event-log.md#signed-heads); ``None``: the chain is not."""
    pruned: PrunedSession | None = None
    """The session's record, when a prune removed it (its events are gone, its head kept)."""
    pruned_sessions: int = 0
    """Sessions of the store a prune removed, whose positions the store accounts for."""
    pruned_events: int = 0
    """Their events."""
