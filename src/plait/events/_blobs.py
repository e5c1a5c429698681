"""Large strings leave the event for a content-addressed blob, and come back on read.

Only fields a type names in ``BLOB_FIELDS`` are looked at, so the walk costs nothing for the
many small events. A deleted blob (redaction, TTL expiry) reads back as ``Redacted``; the event's
stored bytes, and so the hash chain, never change. ``withhold`` keeps only each content's hash
and size, for content a storage policy does not store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from plait.events._values import BlobRef, Redacted

__all__ = [
    "DEFAULT_BLOB_THRESHOLD",
    "blob_refs",
    "externalize",
    "inline_texts",
    "map_leaves",
    "redactions",
    "resolve",
    "withhold",
]

DEFAULT_BLOB_THRESHOLD = 8 * 1024
"""Strings of more UTF-8 bytes than this are stored as blobs."""

T = TypeVar("T")

BlobLookup = Callable[[BlobRef], "str | Redacted"]
"""Return a blob's content, or ``Redacted`` when it was deleted."""


def externalize(value: T, threshold: int, out: dict[str, bytes], scope: bytes = b"") -> T:
    """Return ``value`` with large blob fields as ``BlobRef``s; put their bytes in ``out``.

    With a ``scope``, each blob is the scope then the content, so no other event shares it.
    """

    def leaf(old: Any) -> Any:
        # A cheap length test first: a str's UTF-8 size is at most 4 bytes a character.
        if not isinstance(old, str) or len(old) * 4 <= threshold:
            return old
        data = old.encode()
        if len(data) <= threshold:
            return old
        blob = scope + data
        sha = hashlib.sha256(blob).hexdigest()
        out[sha] = blob
        return BlobRef(sha256=sha, size=len(data), skip=len(scope))

    return _map(value, leaf)


def resolve(value: T, lookup: BlobLookup) -> T:
    """Return ``value`` with every ``BlobRef`` in its blob fields replaced by its content."""
    return _map(value, lambda old: lookup(old) if isinstance(old, BlobRef) else old)


def withhold(value: T) -> T:
    """Return ``value`` with each non-empty content string as ``Redacted``: hash and size."""

    def leaf(old: Any) -> Any:
        if not isinstance(old, str) or not old:
            return old
        data = old.encode()
        return Redacted(sha256=hashlib.sha256(data).hexdigest(), size=len(data))

    return _map(value, leaf)


def blob_refs(value: Any) -> list[BlobRef]:
    """List every ``BlobRef`` in ``value``'s blob fields, in field order."""
    return _leaves(value, BlobRef)


def inline_texts(value: Any) -> list[str]:
    """List every non-empty string in ``value``'s blob fields: content inside the event."""
    return [text for text in _leaves(value, str) if text]


def redactions(value: Any) -> list[Redacted]:
    """List every ``Redacted`` in ``value``'s blob fields: content the log does not have."""
    return _leaves(value, Redacted)


def _leaves(value: Any, kind: type[T]) -> list[T]:
    found: list[T] = []

    def leaf(old: Any) -> Any:
        if isinstance(old, kind):
            found.append(old)
        return old

    _map(value, leaf)
    return found


def map_leaves(value: T, leaf: Callable[[Any], Any]) -> T:
    """Return ``value`` with ``leaf`` applied to every leaf of its blob fields."""
    return _map(value, leaf)


def _map(value: T, leaf: Callable[[Any], Any]) -> T:
    """Return ``value`` with ``leaf`` applied to every leaf of its blob fields, recursing into
    lists and structs; unchanged parts are shared, not copied."""
    fields: tuple[str, ...] = getattr(value, "BLOB_FIELDS", ())
    if not fields:
        return value
    changes: dict[str, Any] = {}
    for name in fields:
        old = getattr(value, name)
        new = _map_field(old, leaf)
        if new is not old:
            changes[name] = new
    return msgspec.structs.replace(value, **changes) if changes else value  # type: ignore[type-var]


def _map_field(old: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(old, list):
        items = [_map_field(item, leaf) for item in old]
        return items if any(a is not b for a, b in zip(items, old, strict=True)) else old
    if isinstance(old, msgspec.Struct) and hasattr(old, "BLOB_FIELDS"):
        return _map(old, leaf)
    return leaf(old)
