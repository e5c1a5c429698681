"""Large strings leave the event for a content-addressed blob, and come back on read.

Only fields a type names in ``BLOB_FIELDS`` are looked at, so the walk costs nothing for the
many small events. A deleted blob (redaction, TTL expiry) reads back as ``Redacted``; the event's
stored bytes, and so the hash chain, never change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from plait.events.values import BlobRef, Redacted

__all__ = ["DEFAULT_BLOB_THRESHOLD", "blob_refs", "externalize", "resolve"]

DEFAULT_BLOB_THRESHOLD = 8 * 1024
"""Strings of more UTF-8 bytes than this are stored as blobs."""

T = TypeVar("T")

BlobLookup = Callable[[str], "str | Redacted"]
"""Return a blob's content by hex sha-256, or ``Redacted`` when it was deleted."""


def externalize(value: T, threshold: int, out: dict[str, bytes]) -> T:
    """Return ``value`` with large blob fields as ``BlobRef``s; put their bytes in ``out``."""
    fields: tuple[str, ...] = getattr(value, "BLOB_FIELDS", ())
    if not fields:
        return value
    changes: dict[str, Any] = {}
    for name in fields:
        old = getattr(value, name)
        new = _externalize_field(old, threshold, out)
        if new is not old:
            changes[name] = new
    return msgspec.structs.replace(value, **changes) if changes else value  # type: ignore[type-var]


def _externalize_field(old: Any, threshold: int, out: dict[str, bytes]) -> Any:
    if isinstance(old, str):
        # A cheap length test first: a str's UTF-8 size is at least its length.
        if len(old) * 4 <= threshold:
            return old
        data = old.encode()
        if len(data) <= threshold:
            return old
        sha = hashlib.sha256(data).hexdigest()
        out[sha] = data
        return BlobRef(sha256=sha, size=len(data))
    if isinstance(old, list):
        items = [externalize(item, threshold, out) for item in old]
        return items if any(a is not b for a, b in zip(items, old, strict=True)) else old
    if isinstance(old, msgspec.Struct):
        return externalize(old, threshold, out)
    return old


def resolve(value: T, lookup: BlobLookup) -> T:
    """Return ``value`` with every ``BlobRef`` in its blob fields replaced by its content."""
    fields: tuple[str, ...] = getattr(value, "BLOB_FIELDS", ())
    if not fields:
        return value
    changes: dict[str, Any] = {}
    for name in fields:
        old = getattr(value, name)
        new = _resolve_field(old, lookup)
        if new is not old:
            changes[name] = new
    return msgspec.structs.replace(value, **changes) if changes else value  # type: ignore[type-var]


def _resolve_field(old: Any, lookup: BlobLookup) -> Any:
    if isinstance(old, BlobRef):
        return lookup(old.sha256)
    if isinstance(old, list):
        items = [resolve(item, lookup) for item in old]
        return items if any(a is not b for a, b in zip(items, old, strict=True)) else old
    if isinstance(old, msgspec.Struct):
        return resolve(old, lookup)
    return old


def blob_refs(value: Any) -> list[BlobRef]:
    """List every ``BlobRef`` in ``value``'s blob fields, in field order."""
    found: list[BlobRef] = []
    for name in getattr(value, "BLOB_FIELDS", ()):
        _collect(getattr(value, name), found)
    return found


def _collect(old: Any, found: list[BlobRef]) -> None:
    if isinstance(old, BlobRef):
        found.append(old)
    elif isinstance(old, list):
        for item in old:
            _collect(item, found)
    elif isinstance(old, msgspec.Struct):
        found.extend(blob_refs(old))
