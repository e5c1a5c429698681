"""``SessionViews``: what a ``SessionHandle`` shows of its session: live feeds, the
conversations, histories and stats, from its actors while they run, else from the log."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, cast

from plait._errors import UnknownConversationError
from plait._jsonvalue import JsonObject
from plait.actors import DEFAULT_FEED_LIMIT, Feed, GetHistory, ListConversations
from plait.events import Event, EventStore, FeedLagged, Transient
from plait.events.projections import (
    ConversationInfo,
    ConversationStats,
    Histories,
    HistoryProjection,
    StatsProjection,
    conversation_index,
)
from plait.runtime._outcome import FOLLOWED

if TYPE_CHECKING:
    import pykka

    from plait.actors import Journal, Session

__all__ = ["SessionViews", "Viewed"]


class Viewed(Protocol):
    """A session as its views read it (its ``SessionHost``): its journal, and its actor while
    it runs."""

    @property
    def journal(self) -> Journal: ...

    @property
    def closed(self) -> bool: ...

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def actor(self) -> pykka.ActorRef[Session] | None: ...


class SessionViews:
    """The reading half of ``SessionHandle``."""

    session_id: str
    root_conversation_id: str
    _host: Viewed

    @property
    def _store(self) -> EventStore:
        return self._host.journal.store

    def subscribe(self, *, transient: bool = True, limit: int = DEFAULT_FEED_LIMIT) -> Feed:
        """Return a live feed of the session's events from now on.

        Its transient text deltas come too, unless ``transient`` is false: a waiter that reads
        only events is then not woken for every streamed fragment. It holds at most ``limit``
        items not yet read: a reader that far behind gets a ``FeedLagged`` with the seq to
        read the log from (``Feed.catch_up``), not a feed that grows without bound.
        """
        return self._host.journal.feed(transient, limit)

    def _follow(self, everything: bool = False) -> Feed:
        """A feed for a ``Follower``: what it reads, or every event and text delta."""
        return self._host.journal.feed(everything, kinds=None if everything else FOLLOWED)

    async def events(self) -> AsyncIterator[Event | Transient]:
        """Iterate over the live feed from asyncio code, until the session closes (``async with
        session.subscribe() as feed: async for item in feed`` does the same, and can stop
        taking text deltas)."""
        with self.subscribe() as feed:
            while (item := await feed.aget(timeout=0.5)) is not None or not self._host.closed:
                if isinstance(item, FeedLagged):  # what it missed, from the log
                    for event in await asyncio.to_thread(feed.catch_up, item):
                        yield event
                elif item is not None:
                    yield item

    def conversations(self) -> list[ConversationInfo]:
        """The live conversations (``conv.list``), as they are now: a snapshot that later
        changes of the session leave as it is."""
        live, found = self._ask_live(ListConversations())
        if not live:
            return conversation_index(self._folded())
        return list(cast(tuple[ConversationInfo, ...], found))

    def history(self, conversation_id: str | None = None) -> list[JsonObject]:
        """A conversation's history as OpenAI chat messages (the root by default), as it is
        now: the caller owns what it gets."""
        cid = conversation_id or self.root_conversation_id
        live, found = self._ask_live(GetHistory(cid))
        if live:
            messages = None if found is None else list(cast(tuple[JsonObject, ...], found))
        else:
            conv = self._folded().conversations.get(cid)
            messages = None if conv is None else [m.to_openai() for m in conv.messages]
        if messages is None:
            raise UnknownConversationError(self.session_id, cid)
        return messages

    def stats(self) -> dict[str, ConversationStats]:
        """Per-conversation metrics, by conversation id: tokens, tool calls, MCP latency,
        cancellations, failures (folded from the log: ``plait stats`` shows the same)."""
        events = self._store.read(self.session_id, resolve_blobs=False)
        return StatsProjection().fold(events).conversations

    def _ask_live(self, message: object) -> tuple[bool, object]:
        """Ask the session actor, if it runs: ``(True, its reply)``; ``(False, None)`` when the
        session is closed or passive (the log has it all, and reading it wakes nothing)."""
        host = self._host
        with host.lock:
            if host.actor is None:
                return False, None
            return True, host.actor.ask(message, timeout=30)

    def _folded(self) -> Histories:
        """The histories folded from the log (once the session's actors are gone)."""
        return HistoryProjection().fold(self._store.read(self.session_id))
