"""Text an event may hold apart from itself: inline, in a blob beside the log, or gone.

Re-exported by ``plait.events._values``, where the types that carry it live.
"""

from __future__ import annotations

import msgspec

__all__ = ["BlobRef", "Content", "Redacted", "as_text"]


class BlobRef(
    msgspec.Struct, frozen=True, omit_defaults=True, tag="blob", tag_field="kind", gc=False
):
    """Stands in a stored event for a large string kept once, content-addressed, beside the log."""

    sha256: str
    """Hex sha-256 of the blob: the UTF-8 content, after ``skip`` bytes of scope if any."""
    size: int
    """Content size in bytes."""
    skip: int = 0
    """Bytes before the content: a scope (a stream, or a stream and seq, and a salt) that
    gives content which must be deletable on its own (an erasable session's, a ``ttl``
    conversation's) a blob no other session, or event, shares (docs/storage.md#erasure)."""


class Redacted(
    msgspec.Struct, frozen=True, tag="redacted", tag_field="kind", omit_defaults=True, gc=False
):
    """What a reader sees where content was deleted (redaction, TTL expiry) or never stored
    (a ``headers_only`` or ``none`` conversation's)."""

    sha256: str
    """Hex sha-256 of the content (of its scoped blob, for expired ``ttl`` content)."""
    size: int
    """Size in bytes of the content that was removed."""
    erased: bool = False
    """It was erased on request (``ContentErased``, docs/storage.md#erasure); set as a read
    finds it, never stored."""

    @property
    def text(self) -> str:
        """How readers show it: ``[erased]``, or ``[redacted: N bytes]``."""
        return "[erased]" if self.erased else f"[redacted: {self.size} bytes]"


Content = str | BlobRef | Redacted
"""Text that may be large: inline when small, a ``BlobRef`` on disk, ``Redacted`` once deleted."""


def as_text(content: Content | None) -> str | None:
    """``content`` as text, ``[redacted]`` where the log does not have it."""
    if isinstance(content, str) or content is None:
        return content
    return "[erased]" if isinstance(content, Redacted) and content.erased else "[redacted]"
