"""Storage policies (docs/storage.md): what the log keeps of each conversation.

A conversation's ``ConversationOpened.storage_policy`` decides, and a conversation it creates
inherits it. The running session is not affected: its actors fold every event with its
content. Only what reaches the store is shaped, before it is hashed, so the log never holds
content its policy forbids and its chain always verifies.

- ``full``: every event, with its content.
- ``headers_only``: every event; each content field (instructions, task input, model text,
  tool arguments and outputs, images, summaries) is stored as ``Redacted(sha256, size)``.
  Times, tool names, call ids, outcomes, durations, token counts, sizes and hashes remain.
- ``none``: only the conversation's opening and destruction, its tasks' enqueue, start and
  end, aborted turns and failed model requests, with content withheld as for
  ``headers_only``; nothing else of it is stored (no turns, no tool calls).
- ``ttl``: every event with its content, each content string in a blob of that event alone;
  ``Expiry`` deletes those blobs ``ttl_sec`` after the event was recorded. Expired content
  reads back as ``Redacted``; the events, and so the chain, are unchanged.

What needs the content says so when the log does not have it (``missing_content``): replay,
fork and resume raise ``ContentUnavailableError`` naming the conversation or seq. Audit and
verify work under every policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

import msgspec

from plait.events._blobs import blob_refs, redactions, withhold
from plait.events._store import EventStore
from plait.events._types import (
    Body,
    ContentErased,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    ModelRequestFailed,
    NewEvent,
    SessionStarted,
    StopRequested,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskStarted,
    TurnAborted,
)
from plait.events._values import StoragePolicy

__all__ = ["KEPT_BY_NONE", "Expiry", "Policies", "erased_line", "missing_content"]

KEPT_BY_NONE = frozenset(
    {
        ConversationOpened,
        ConversationDestroyed,
        TaskEnqueued,
        TaskStarted,
        TaskCompleted,
        TaskDropped,
        TurnAborted,
        StopRequested,
        ModelRequestFailed,
    }
)
"""The events a ``none`` conversation keeps: its start, its end and its errors."""


class Policies:
    """Each conversation's storage policy in one stream, learned from its events."""

    def __init__(self, past: Iterable[Event | NewEvent | Body] = ()) -> None:
        self.of: dict[str, StoragePolicy] = {}
        """Conversations whose policy is not ``full``."""
        self.apart = False
        """The session keeps its content in blobs of its own, apart from its hashed events,
        so that it can be erased (``RecordedSettings.erasable``, docs/storage.md#erasure)."""
        self.learn(past)

    def learn(self, items: Iterable[Event | NewEvent | Body]) -> None:
        """Note the policy of each conversation ``items`` open, and the session's start."""
        for item in items:
            if isinstance(item, Body):
                body, cid = item, None
            else:
                body, cid = item.body, item.conversation_id
            if isinstance(body, ConversationOpened) and cid and body.storage_policy.kind != "full":
                self.of[cid] = body.storage_policy
            elif isinstance(body, SessionStarted):
                self.apart = body.settings is not None and body.settings.erasable

    @property
    def plain(self) -> bool:
        """Whether every event is stored as it is: each conversation in full, content inline."""
        return not self.of and not self.apart

    @property
    def expires(self) -> bool:
        """Whether a conversation has a ``ttl`` policy."""
        return any(policy.kind == "ttl" for policy in self.of.values())

    def shape(self, item: NewEvent) -> NewEvent | None:
        """What the log keeps of ``item``: itself, itself without content, or nothing."""
        policy = self.of.get(item.conversation_id) if item.conversation_id else None
        if policy is None:
            if self.apart and item.body.BLOB_FIELDS:
                return msgspec.structs.replace(item, session_blobs=True)
            return item
        if policy.kind == "ttl":
            return msgspec.structs.replace(item, scoped_blobs=True)
        if policy.kind == "none" and type(item.body) not in KEPT_BY_NONE:
            return None
        body = withhold(item.body)
        return item if body is item.body else msgspec.structs.replace(item, body=body)


def missing_content(
    events: Sequence[Event], needed: Callable[[str | None], bool] = lambda _: True
) -> str | None:
    """Say what content of ``events`` the log does not have, for the conversations ``needed``
    names (all by default); ``None`` when it has all of it."""
    for event in events:
        body = event.body
        if (
            isinstance(body, ContentErased)
            and body.blobs
            and (not body.conversations or any(map(needed, body.conversations)))
        ):
            return erased_line(event)
    for cid, policy in Policies(events).of.items():
        if policy.kind in ("headers_only", "none") and needed(cid):
            return (
                f"conversation {cid} is stored with storage policy {policy.kind}: "
                "its content was never stored"
            )
    for event in events:
        if needed(event.conversation_id) and redactions(event.body):
            what = type(event.body).__name__
            return (
                f"seq {event.seq} ({what}, conversation {event.conversation_id}): "
                "its content was deleted (expired under a ttl storage policy, or redacted)"
            )
    return None


def erased_line(event: Event) -> str:
    """What stands where erased content was needed: when, by whom, why (``ContentErased``)."""
    body = event.body
    assert isinstance(body, ContentErased)
    whose = f"conversation {', '.join(body.conversations)}'s" if body.conversations else "its"
    by = f" by {body.requested_by}" if body.requested_by else ""
    why = f" ({body.reason})" if body.reason else ""
    when = event.at.strftime("%Y-%m-%d %H:%M UTC")
    return f"{whose} content was erased on request at seq {event.seq}{by}, {when}{why}"


class Expiry:
    """Deletes ``ttl`` conversations' content once it is older than their ``ttl_sec``.

    It remembers, per stream, how far everything has expired, so a sweep reads only newer
    events.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._streams: dict[str, tuple[Policies, int]] = {}

    def sweep(self, now: datetime | None = None) -> int:
        """Delete every content blob due by ``now`` (the store's clock by default); return how
        many were deleted."""
        now = self.store.clock() if now is None else now
        return sum(self._sweep(info.stream, now) for info in self.store.streams())

    def _sweep(self, stream: str, now: datetime) -> int:
        policies, done = self._streams.get(stream, (Policies(), 0))
        events = self.store.read(stream, after=done, resolve_blobs=False)
        policies.learn(events)
        deleted = 0
        for event in events:
            policy = policies.of.get(event.conversation_id or "")
            if policy is None or policy.ttl_sec is None:
                done = event.seq if done == event.seq - 1 else done
                continue
            if event.at + timedelta(seconds=policy.ttl_sec) > now:
                continue  # not due; neither, mostly, is what follows, but look anyway
            for ref in blob_refs(event.body):
                if ref.skip and self.store.blobs.get(ref.sha256) is not None:
                    deleted += self.store.blobs.redact(ref.sha256)
            done = event.seq if done == event.seq - 1 else done
        self._streams[stream] = (policies, done)
        return deleted
