"""Stream one model request on the effect loop; its reply comes back as ``ModelFinished``.

The request never blocks the conversation's thread: its text streams to the feeds as deltas,
a failed attempt that will be retried comes back as ``AttemptFailedNotice``, and its end as
``ModelFinished``, each carrying the turn's token, so a reply that arrives after an abort is
recognised and dropped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import msgspec
import pykka

from plait._errors import ModelError
from plait.actors._messages import AttemptFailedNotice, ModelFinished
from plait.events import AgentMessageDelta, ReasoningDelta, Transient

if TYPE_CHECKING:
    from plait.actors._deps import ConversationDeps
    from plait.actors._model import AttemptFailed
    from plait.actors._model_types import ResponsesInput
    from plait.actors._refs import Recipient
    from plait.actors._stream import ModelReply
    from plait.events.projections import ContentShape

__all__ = ["HeldDeltas", "call_model"]


def call_model(
    deps: ConversationDeps,
    me: Recipient,
    turn: tuple[str, str, int],
    messages: msgspec.Raw,
    tools: Sequence[Mapping[str, object]] | msgspec.Raw,
    shape: ContentShape,
    responses: ResponsesInput | None = None,
) -> tuple[Future[ModelReply], HeldDeltas] | None:
    """Send the request of a turn (``turn``: its conversation, task and token; ``messages``
    holding assistant messages with tool calls and no text in ``shape``) for ``me``, the
    conversation, which hears how it ends (``ModelFinished``); return its future and its
    deltas, held until the conversation has recorded the request (then ``open`` them, or
    ``discard``). ``responses``: on the Responses API, what the request sends in place of
    ``messages``. ``None`` when the session is being stopped:
    nothing is sent."""
    from plait.actors._model import ModelRequest

    conversation_id, task, token = turn
    journal = deps.journal
    deltas = HeldDeltas(journal.publish)

    def on_text(text: str) -> None:
        if journal.wants_deltas:
            deltas.publish(AgentMessageDelta(conversation_id, task, text))

    def on_reasoning(text: str) -> None:
        if journal.wants_deltas:
            deltas.publish(ReasoningDelta(conversation_id, task, text))

    def on_attempt_failed(failed: AttemptFailed) -> None:
        _tell(
            me,
            AttemptFailedNotice(
                token, failed.attempt, failed.error, failed.status, failed.retry_in_sec
            ),
        )

    with journal.unsealed() as live:
        if not live:
            return None  # the session is being stopped: nothing more starts
        future = deps.effects.submit(
            deps.model_client.complete(
                ModelRequest(messages, tools, deps.model_options, shape, responses),
                on_text=on_text,
                on_attempt_failed=on_attempt_failed,
                on_reasoning=on_reasoning,
                on_sent=deltas.sent.set,
            )
        )

    def done(f: Future[ModelReply]) -> None:
        if f.cancelled():
            return
        error = f.exception()
        if error is None:
            _tell(me, ModelFinished(token, reply=f.result()))
        else:
            kind = error.kind if isinstance(error, ModelError) else None
            why = str(error) or type(error).__name__
            _tell(me, ModelFinished(token, error=why, error_kind=kind))

    future.add_done_callback(done)
    return future, deltas


def _tell(ref: Recipient, message: object) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the session closed meanwhile
        ref.tell(message)


class HeldDeltas:
    """Transient notifications held back until what they follow is in the feeds.

    A model call starts before its ``ModelRequested`` is durable; its text deltas wait here
    until the conversation has recorded it, so subscribers always see the record first.
    """

    def __init__(self, publish: Callable[[Transient], None]) -> None:
        self._publish = publish
        self.sent = threading.Event()
        """Set once the request they follow is written to the server."""
        self._lock = threading.Lock()
        self._held: list[Transient] | None = []

    def publish(self, delta: Transient) -> None:
        """Publish ``delta`` now, or hold it until :meth:`open`."""
        with self._lock:  # held or not, deltas reach the feeds in the order they arrived
            if self._held is not None:
                self._held.append(delta)
            else:
                self._publish(delta)

    def open(self) -> None:
        """Publish what was held, and from now on publish at once."""
        with self._lock:
            held, self._held = self._held or [], None
            for delta in held:
                self._publish(delta)

    def discard(self) -> None:
        """Drop what was held and what comes later (a compaction's summary is not shown as
        it streams: ``HistoryCompacted`` carries it)."""
        with self._lock:
            self._held = None
            self._publish = _drop


def _drop(delta: Transient) -> None:
    del delta
