"""Hand-offs a cut left open: what a resumed session answers them with
(docs/replay.md#hand-offs-a-fork-cut).

A ``conv_create`` or ``conv_send`` call is answered by its continuation. The group that ends
the caller ``TurnAborted(replaced)`` also queues the target's task and the continuation, and
the continuation answers the call in the group that starts it. A crash keeps each group whole;
a fork copies up to any seq and may cut one, leaving the call open with nothing queued to
answer it. Resumed, the session answers it from what its log holds, before anything runs:

- the continuation started and its answer was cut: the answer it would have recorded (how
  the target's task ended), with ``aborted_by="fork"``: the fork's resume recorded it;
- no continuation was queued: the call is answered ``error``, with the conversation it named
  or opened and why its task did not run (``aborted_by="fork"``); the target's task, if it
  was queued, is dropped, for nobody waits for its result.

All of it is read from the log, so a replay of the fork records the same. Sessions started
before this was done (``RecordedSettings.handoff_answers`` false) resume as they did; a fork
made since does it whatever its source recorded (``ForkOrigin.full_recovery``).
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.actors import ConvCreate, ConvSend, input_items, parse_arguments
from plait.events import (
    Closure,
    ConversationOpened,
    Event,
    NewEvent,
    SessionStarted,
    TaskDropped,
    TaskPlan,
    TaskStarted,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
    as_text,
    recorded_settings,
)
from plait.events.projections import (
    TASKS,
    TaskQueue,
    TaskResult,
    continuation_output,
    handoff_answer,
)

__all__ = [
    "FORK_CUT",
    "NOBODY_WAITS",
    "answers_handoffs",
    "cut_handoffs",
    "fully_recovered",
    "not_run",
    "opened_by",
]

FORK_CUT = "the task did not run: the session was forked between this call and its answer"
"""The ``error`` of the answer of a hand-off whose continuation a fork did not copy."""
NOBODY_WAITS = "its hand-off was cut by a fork: nobody waits for its result"
"""Why the target's task of such a hand-off is dropped (``TaskDropped.reason``)."""


class _Handoff:
    """One ``conv_create`` or ``conv_send`` call that replaced its task, as the log shows it."""

    def __init__(self, request: ToolCallRequested, caller: Event, opened: str | None) -> None:
        self.request = request
        self.caller = caller
        """The caller's ``TurnAborted(replaced)``: its conversation and task."""
        self.opened = opened
        """The conversation a ``conv_create`` opened."""
        self.answer: NewEvent | None = None
        """The answer its started continuation would have recorded, if that was cut."""


def cut_handoffs(past: Sequence[Event]) -> list[NewEvent]:
    """What answers the hand-offs ``past`` leaves open with nothing queued to answer them,
    and drops the target tasks nobody waits for (nothing, if there are none, or if the
    session predates ``RecordedSettings.handoff_answers``: it resumes as it did)."""
    if not answers_handoffs(past):
        return []
    queue = TASKS.initial()
    requests: dict[str, tuple[int, ToolCallRequested]] = {}
    opened: list[tuple[int, str | None, str | None]] = []  # seq, parent, conversation
    handoffs: dict[str, _Handoff] = {}
    for event in past:
        body = event.body
        if isinstance(body, ToolCallRequested):
            requests[body.call_id] = (event.seq, body)
        elif isinstance(body, ConversationOpened):
            opened.append((event.seq, body.parent_id, event.conversation_id))
        elif isinstance(body, ToolCallCompleted):
            handoffs.pop(body.call_id, None)
        elif isinstance(body, TurnAborted):
            for call_id in body.awaiting_call_ids:
                if call_id in requests:
                    since, request = requests[call_id]
                    made = opened_by(opened, since, event.conversation_id)
                    handoffs[call_id] = _Handoff(request, event, made)
        elif isinstance(body, TaskStarted):
            plan = next((p for p in queue.pending if p.task_id == event.task_id), None)
            closure = plan.closure if plan is not None else None
            if plan is not None and closure is not None and closure.call_id in handoffs:
                # What the scheduler answers the call with as the continuation starts, in
                # the same group (actors/_scheduler.py): read before TaskStarted forgets it.
                output = continuation_output(queue, plan) or ""
                answer = ToolCallCompleted(closure.call_id, output, aborted_by="fork")
                handoffs[closure.call_id].answer = NewEvent(answer, *_ids(plan))
        queue = TASKS.apply(queue, event)
    return _answers(handoffs, queue)


def _answers(handoffs: dict[str, _Handoff], queue: TaskQueue) -> list[NewEvent]:
    """The answers of the open hand-offs that no continuation will give, then the drops of
    the target tasks no continuation waits for."""
    queued = [p.closure for p in queue.pending if p.closure is not None]
    answering = {closure.call_id for closure in queued}
    awaited = {closure.target_task_id for closure in queued}
    answers: list[NewEvent] = []
    for call_id, handoff in handoffs.items():
        if handoff.answer is not None:
            answers.append(handoff.answer)
        elif call_id not in answering:
            output = not_run(handoff.request, handoff.opened, FORK_CUT)
            answer = ToolCallCompleted(call_id, output, "error", aborted_by="fork")
            caller = handoff.caller
            answers.append(NewEvent(answer, caller.conversation_id, caller.task_id))
    for plan in queue.pending:
        if plan.chain_depth > 0 and plan.closure is None and plan.task_id not in awaited:
            answers.append(NewEvent(TaskDropped(NOBODY_WAITS, "fork"), *_ids(plan)))
    return answers


def answers_handoffs(past: Sequence[Event]) -> bool:
    """Whether the session of ``past`` answers hand-offs a cut left open: it was started
    recording ``RecordedSettings.handoff_answers``, or forked since forks do."""
    settings = recorded_settings(past)
    return (settings is not None and settings.handoff_answers) or fully_recovered(past)


def fully_recovered(past: Sequence[Event]) -> bool:
    """Whether the session of ``past`` is a fork that recovers as new sessions do
    (``ForkOrigin.full_recovery``), whatever its source recorded."""
    started = past[0].body if past else None
    fork = started.forked_from if isinstance(started, SessionStarted) else None
    return fork is not None and fork.full_recovery


def not_run(request: ToolCallRequested, opened: str | None, error: str) -> str:
    """The answer of a hand-off whose target's task did not run: a continuation's, its
    ``last_assistant_message`` null and ``error`` saying why (docs/conv-tools.md#results);
    ``opened`` is the conversation a ``conv_create`` opened, if it did."""
    parsed = parse_arguments(request.tool, as_text(request.arguments) or "{}")
    closure = Closure(request.call_id, request.tool)
    if isinstance(parsed, ConvCreate):
        items = input_items(parsed.user_instruction, parsed.items)
        closure = Closure(
            request.call_id,
            request.tool,
            target_conversation_id=opened,
            first_user_message=parsed.user_instruction,
            first_items_count=len(items),
        )
    elif isinstance(parsed, ConvSend):
        closure = Closure(
            request.call_id, request.tool, target_conversation_id=parsed.conversation_id
        )
    return handoff_answer(closure, TaskResult(error=error))


def opened_by(
    opened: Sequence[tuple[int, str | None, str | None]], since: int, caller: str | None
) -> str | None:
    """The conversation a ``conv_create`` of conversation ``caller`` requested at seq
    ``since`` opened, of ``opened`` (seq, parent, id), if it did: the one conversation
    ``caller`` opened after it (a task's calls run one at a time)."""
    made = [cid for seq, parent, cid in opened if since < seq and parent == caller]
    return made[-1] if made else None


def _ids(plan: TaskPlan) -> tuple[str, str]:
    return plan.conversation_id, plan.task_id
