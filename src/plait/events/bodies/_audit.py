"""What makes a session's log its own evidence: signed heads (docs/event-log.md#signed-heads),
and the record of content erased on request (docs/storage.md#erasure)."""

from __future__ import annotations

from plait.events.bodies._base import Body

__all__ = ["ContentErased", "HeadSigned"]


class HeadSigned(Body, frozen=True):
    """The session's signing key signed its chain's head: the event just before this one.

    It is an ordinary event, in the chain like any other; what it signs is the head before it
    (``plait.events._signing.head_message``)."""

    seq: int
    """The seq of the head it signs (this event's seq minus one)."""
    head_hash: bytes
    """That event's hash."""
    fingerprint: str
    """The signing key's fingerprint: sha-256 of its raw public key, hex."""
    signature: bytes
    """The Ed25519 signature of the head's message."""


class ContentErased(Body, frozen=True):
    """Content of the session was erased on request: the blobs that held it are deleted, the
    events that named them are as they were, so the chain and its signatures still verify.

    It says who asked, why and what was erased, never the content."""

    upto_seq: int
    """Content of the events up to this seq (the one before this event) was erased."""
    conversations: list[str] = []
    """Only these conversations' content; empty: the whole session's."""
    requested_by: str = ""
    """Who asked for it (``plait forget --by``; the user running it by default)."""
    reason: str = ""
    """Why, as they gave it (a request's reference, say)."""
    events: int = 0
    """Events whose content was erased."""
    blobs: int = 0
    """Blobs deleted."""
    size: int = 0
    """Bytes of content deleted."""
    kept: int = 0
    """Blobs of those events kept, as another conversation's events still hold them (a
    ``conv_create`` call's arguments are its caller's as well as the new conversation's)."""
