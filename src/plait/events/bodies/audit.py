"""What makes a session's log its own evidence: signed heads (docs/event-log.md#signed-heads)."""

from __future__ import annotations

from plait.events.bodies.base import Body

__all__ = ["HeadSigned"]


class HeadSigned(Body, frozen=True):
    """The session's signing key signed its chain's head: the event just before this one.

    It is an ordinary event, in the chain like any other; what it signs is the head before it
    (``plait.events.signing.head_message``)."""

    seq: int
    """The seq of the head it signs (this event's seq minus one)."""
    head_hash: bytes
    """That event's hash."""
    fingerprint: str
    """The signing key's fingerprint: sha-256 of its raw public key, hex."""
    signature: bytes
    """The Ed25519 signature of the head's message."""
