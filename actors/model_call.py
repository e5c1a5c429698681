"""Stream one model request on the effect loop; its reply comes back as ``ModelFinished``.

The request never blocks the conversation's thread: its text streams to the feeds as deltas,
a failed attempt that will be retried comes back as ``AttemptFailedNotice``, and its end as
``ModelFinished``, each carrying the turn's token, so a reply that arrives after an abort is
recognised and dropped.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import msgspec
import pykka

from plait.actors.journal import HeldDeltas
from plait.actors.messages import AttemptFailedNotice, ModelFinished
from plait.errors import ModelError
from plait.events.types import AgentMessageDelta, ReasoningDelta

if TYPE_CHECKING:
    from plait.actors.conversation import Conversation

__all__ = ["call_model"]


def call_model(
    conv: Conversation, messages: msgspec.Raw, tools: list[Any] | msgspec.Raw
) -> HeldDeltas | None:
    """Send the running task's request for the current turn; return its deltas, held until
    the conversation has recorded the request (then ``open`` them, or ``discard``). ``None``
    when the session is being stopped: nothing is sent."""
    from plait.actors.model import ModelRequest

    assert conv.run is not None
    me, journal, task, token = (
        conv.actor_ref,
        conv.deps.journal,
        conv.run.plan.task_id,
        conv.run.token,
    )
    deltas = HeldDeltas(journal.publish)

    def on_text(text: str) -> None:
        if journal.wants_deltas:
            deltas.publish(AgentMessageDelta(conv.id, task, text))

    def on_reasoning(text: str) -> None:
        if journal.wants_deltas:
            deltas.publish(ReasoningDelta(conv.id, task, text))

    def on_attempt_failed(failed: Any) -> None:
        _tell(
            me,
            AttemptFailedNotice(
                token, failed.attempt, failed.error, failed.status, failed.retry_in_sec
            ),
        )

    with journal.unsealed() as live:
        if not live:
            return None  # the session is being stopped: nothing more starts
        future: Future[Any] = conv.deps.effects.submit(
            conv.deps.model_client.complete(
                ModelRequest(messages, tools, conv.deps.model_options),
                on_text=on_text,
                on_attempt_failed=on_attempt_failed,
                on_reasoning=on_reasoning,
            )
        )

    def done(f: Future[Any]) -> None:
        if f.cancelled():
            return
        error = f.exception()
        if error is None:
            _tell(me, ModelFinished(token, reply=f.result()))
        else:
            kind = error.kind if isinstance(error, ModelError) else None
            why = str(error) or type(error).__name__
            _tell(me, ModelFinished(token, error=why, error_kind=kind))

    conv.run.model_future = future
    future.add_done_callback(done)
    return deltas


def _tell(ref: Any, message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the session closed meanwhile
        ref.tell(message)
