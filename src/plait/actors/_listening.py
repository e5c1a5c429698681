"""What a session's actors record for each other: kept until every actor that folds it has.

An actor that folds what the others record (the session, its conversations) listens: the
journal keeps each recorded group, with the actor that recorded it, until every listener has
taken it, and a listener takes what it has not yet, in log order, before it handles its next
message (``recorded``). So an actor sees the others' events before any command sent after
them, without a wake-up of its thread per event.

Actors that start from a session's past must not miss what is recorded between that past and
their listening (a recovery's re-run of a tool call, an MCP server's tools listed): ``mark``
says where the past ends, everything recorded after it is kept, and they listen ``since`` it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import msgspec

from plait.actors._messages import CatchUp
from plait.events import Event

if TYPE_CHECKING:
    from plait.actors._refs import Recipient

__all__ = ["BACKLOG", "Listeners"]

BACKLOG = 256
"""How many recorded groups are kept for an actor that has not folded them, before it is told
to (``CatchUp``); an actor with messages to handle folds them first anyway."""


class Listeners:
    """The actors that fold what the others record, and the groups some has not taken (the
    first is number ``_kept_from``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, _Listener] = {}
        self._kept: list[tuple[str | None, tuple[Event, ...]]] = []
        self._kept_from = 0
        self._mark: int | None = None
        """Where the past of actors about to start ends: kept from there until one listens."""

    def mark(self) -> int:
        """Keep what is recorded from now on for actors about to start with what was recorded
        so far; return where that is (their ``since``)."""
        with self._lock:
            self._mark = self._kept_from + len(self._kept)
            return self._mark

    def listen(self, actor_ref: Recipient, since: int | None = None) -> None:
        """Keep for ``actor_ref`` what other actors record from now on, or from ``since`` (a
        ``mark``, still kept for a listener or by the mark itself)."""
        with self._lock:
            end = self._kept_from + len(self._kept)
            if since is not None:
                assert self._kept_from <= since <= end, "what it must fold is forgotten"
                self._mark = None
            taken = end if since is None else since
            self._listeners[actor_ref.actor_urn] = _Listener(actor_ref, taken)

    def unlisten(self, actor_ref: Recipient) -> None:
        """Keep nothing more for ``actor_ref``."""
        with self._lock:
            if self._listeners.pop(actor_ref.actor_urn, None) is not None:
                self._forget()

    def recorded(self, actor_ref: Recipient) -> list[Event]:
        """What others recorded since ``actor_ref`` last asked (or began to listen), in log
        order. An actor calls it before it handles each message."""
        urn = actor_ref.actor_urn
        with self._lock:
            listener = self._listeners.get(urn)
            end = self._kept_from + len(self._kept)
            if listener is None or listener.taken == end:
                return []
            groups = self._kept[listener.taken - self._kept_from :]
            listener.taken, listener.nudged = end, False
            self._forget()
        return [event for origin, events in groups if origin != urn for event in events]

    def keep(self, origin: Recipient | None, events: list[Event]) -> None:
        """Keep ``events``, recorded by ``origin``, for the listeners (the journal calls it in
        log order); tell one that lets too many pile up to fold them."""
        with self._lock:
            if not events or (not self._listeners and self._mark is None):
                return
            self._kept.append((None if origin is None else origin.actor_urn, tuple(events)))
            if len(self._kept) <= BACKLOG:
                return
            for urn, listener in list(self._listeners.items()):
                if not listener.ref.is_alive():  # stopped without unlisten (it failed)
                    del self._listeners[urn]
            self._forget()
            end = self._kept_from + len(self._kept)
            late = [x for x in self._listeners.values() if end - x.taken > BACKLOG and not x.nudged]
            for listener in late:
                listener.nudged = True
                with contextlib.suppress(Exception):  # stopped meanwhile: unlisten follows
                    listener.ref.tell(CatchUp())

    def _forget(self) -> None:
        """Drop the groups every listener has taken (and the mark is past)."""
        end = self._kept_from + len(self._kept)
        low = min((listener.taken for listener in self._listeners.values()), default=end)
        if self._mark is not None:
            low = min(low, self._mark)
        if low > self._kept_from:
            del self._kept[: low - self._kept_from]
            self._kept_from = low


class _Listener(msgspec.Struct):
    """An actor that folds what the others record, and how far it has taken it."""

    ref: Recipient
    taken: int
    nudged: bool = False  # told CatchUp, and has not taken anything since
