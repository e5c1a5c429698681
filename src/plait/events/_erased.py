"""How a read shows content erased on request: ``[erased]``, not ``[redacted: N bytes]``
(docs/storage.md#erasure).

The blobs ``forget`` deleted read back as ``Redacted`` like any deleted blob; the stream's own
``ContentErased`` events say which of them were erased on request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from plait.events._blobs import map_leaves
from plait.events._types import ContentErased, Event
from plait.events._values import Redacted

__all__ = ["mark_erased"]


def mark_erased(events: Sequence[Event]) -> list[Event]:
    """``events`` (of one stream, in order) with the content that a later ``ContentErased``
    of theirs covers marked ``Redacted(erased=True)``."""
    erasures = [e.body for e in events if isinstance(e.body, ContentErased)]
    if not erasures:
        return list(events)
    return [_marked(event, erasures) for event in events]


def _marked(event: Event, erasures: list[ContentErased]) -> Event:
    for erasure in erasures:
        if event.seq <= erasure.upto_seq and (
            not erasure.conversations or event.conversation_id in erasure.conversations
        ):
            body = map_leaves(event.body, _erased)
            return event if body is event.body else msgspec.structs.replace(event, body=body)
    return event


def _erased(leaf: Any) -> Any:
    if isinstance(leaf, Redacted) and not leaf.erased:
        return msgspec.structs.replace(leaf, erased=True)
    return leaf
