"""A store's blobs, a part of every store (``EventStore.blobs``): content kept beside the
log, found by its sha-256, deleted leaving a tombstone (docs/storage.md#blobs), erased for good
(docs/storage.md#erasure).

A backend's part provides ``state`` and ``_redact``, and may look up many blobs (``states``),
redact them (``_redact_all``) and ``scrub`` its own faster or more thorough way. An append
writes its blobs with its rows, in its own transaction: that is the backend's store's.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from functools import partial
from typing import Final

import msgspec

from plait._errors import BlobMissingError, CorruptEventError, StoreError, TamperedError
from plait.events._blobs import blob_refs, resolve
from plait.events._content import BlobRef, Redacted
from plait.events._types import Event

__all__ = ["REDACTED", "BlobStore", "RedactedMarker"]


class RedactedMarker:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REDACTED"


REDACTED: Final = RedactedMarker()
"""What ``BlobStore.state`` returns for a blob that was deliberately deleted (a tombstone
remains)."""


class BlobStore(ABC):
    """Blobs: read, deleted, erased; and how a blob that must be deletable alone is scoped."""

    def __init__(self) -> None:
        self._salt_key = os.urandom(32)
        """Makes each scope's salt: see ``scope``."""

    def get(self, sha256: str) -> bytes | None:
        """Return a blob's bytes, or ``None`` when it is missing or redacted."""
        found = self.state(sha256)
        return found if isinstance(found, bytes) else None

    @abstractmethod
    def state(self, sha256: str) -> bytes | RedactedMarker | None:
        """Return a blob's bytes, ``REDACTED`` (deleted, a tombstone left), or ``None`` when
        unknown."""

    def states(self, sha256s: list[str]) -> dict[str, bytes | RedactedMarker]:
        """The blobs of ``sha256s`` that are stored (a tombstone as ``REDACTED``)."""
        found = {sha256: self.state(sha256) for sha256 in sha256s}
        return {sha256: data for sha256, data in found.items() if data is not None}

    def redact(self, sha256: str) -> bool:
        """Delete a blob's content, leaving a tombstone; return whether it was stored."""
        return self._redact(sha256)

    def erase(self, sha256s: Iterable[str]) -> int:
        """Delete the content of each blob of ``sha256s`` (tombstones remain), then make it
        leave the store's files (``scrub``); return how many held content. What ``scrub``
        could not do is raised as ``StoreError`` after the deletion, which stands."""
        erased = self._redact_all(list(dict.fromkeys(sha256s)))
        problem = self.scrub()
        if problem is not None:
            raise StoreError(problem)
        return erased

    def scrub(self) -> str | None:
        """Make deleted content leave the store's files, where the backend keeps old copies
        (docs/storage.md#erasure); return what could not be done, ``None`` when done."""
        return None

    def scope(self, name: str) -> bytes:
        """What a blob that must be deletable on its own starts with: its scope's ``name``
        (a stream, or a stream and seq), then a salt, so that once it is deleted the digest
        its event keeps cannot be matched with guessed content (docs/storage.md#erasure).
        The salt is secret, kept only in the blob; the same in one store object for one
        name, so that the same text twice in a session is stored once."""
        salt = hashlib.sha256(self._salt_key + name.encode()).digest()[:16]
        return name.encode() + b"\n" + salt

    def resolve(self, events: list[Event], held: list[Event]) -> list[Event]:
        """``events`` with the blobs of those ``held`` brought back, all looked up at once
        (one query on PostgreSQL, where each is a round trip); a blob edited is
        ``TamperedError``, one missing ``BlobMissingError``, one redacted a ``Redacted``."""
        refs = {ref.sha256 for event in held for ref in blob_refs(event.body)}
        found = self.states(sorted(refs))
        done: dict[int, Event] = {}
        for event in held:
            body = resolve(event.body, partial(self._blob_text, event=event, lookup=found.get))
            if body is not event.body:
                done[id(event)] = msgspec.structs.replace(event, body=body)
        return [done.get(id(event), event) for event in events] if done else events

    def _redact_all(self, sha256s: list[str]) -> int:
        """Delete each blob's content, leaving tombstones; return how many held content."""
        held = [sha256 for sha256 in sha256s if isinstance(self.state(sha256), bytes)]
        return sum(map(self._redact, held))

    @staticmethod
    def _blob_text(
        ref: BlobRef, event: Event, lookup: Callable[[str], bytes | RedactedMarker | None]
    ) -> str | Redacted:
        found = lookup(ref.sha256)
        if found is REDACTED:
            return Redacted(sha256=ref.sha256, size=ref.size)
        if not isinstance(found, bytes):
            raise BlobMissingError(ref.sha256, f"stream {event.stream} seq {event.seq}")
        if hashlib.sha256(found).hexdigest() != ref.sha256:
            raise TamperedError(event.stream, event.seq, f"blob sha256:{ref.sha256} was edited")
        try:
            return found[ref.skip :].decode()
        except UnicodeDecodeError as exc:  # its hash matched: it was stored so, not edited
            raise CorruptEventError(event.stream, event.seq, f"blob is not text: {exc}") from None

    @abstractmethod
    def _redact(self, sha256: str) -> bool:
        """Delete a blob's content, keep a tombstone; return whether it existed."""
