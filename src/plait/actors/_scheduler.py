"""The ``Scheduler``: starts the session's tasks one at a time, in queue order.

It decides from the session's ``TaskQueue`` (``events/projections/_tasks.py``), the one the
journal folds as it records (``Journal.tasks``), whoever records: the same queue by which a
conversation ends its task and the runtime sees the session idle. It reads it held still, so it
never decides from half a group, and records what it decides (a task queued, started, or
dropped by an interrupt) (docs/conversations.md#the-single-timeline). It lives in the
``Session`` actor,
which hands it the scheduling messages and delivers the tasks it starts: a task goes from the
caller to its conversation through one actor, not two.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from plait._errors import SessionClosedError
from plait.actors._messages import (
    Abort,
    Enqueue,
    GetQueue,
    Interrupt,
    RunTask,
    StartNext,
    Stop,
    TaskEnded,
)
from plait.actors._run_slot import RunSlot
from plait.actors._seams import TaskGateLike
from plait.events import (
    Event,
    InterruptCause,
    NewEvent,
    TaskDropped,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    ToolCallCompleted,
)
from plait.events.projections import (
    TaskQueue,
    chain_to_drop,
    continuation_output,
    next_task,
)

__all__ = ["MESSAGES", "Scheduler"]


INTERRUPTED_BY = {"user": "interrupted by the user", "close": "interrupted by the close"}
"""What an interrupt's records say, for people (its ``cause`` says it for programs)."""


MESSAGES = (Enqueue, TaskEnded, Interrupt, GetQueue, StartNext, Stop)
"""The messages the scheduler handles."""


class Scheduler:
    """The session's single flight: starts one task at a time, in ``pending`` order."""

    def __init__(
        self,
        stream: str,
        tasks: Callable[[], AbstractContextManager[TaskQueue]],
        record: Callable[..., list[Event]],
        catch_up: Callable[[], object],
        deliver: Callable[[RunTask | Abort], object],
        refusal: Callable[[], Exception | None] = lambda: None,
        when_durable: Callable[[Callable[[Exception | None], object]], object] | None = None,
        gate: TaskGateLike | None = None,
        wake: Callable[[], object] = lambda: None,
    ) -> None:
        """``tasks()``: the session's task queue, as the journal folds it, held still while
        it is read; ``record(group, ahead=False)`` appends a group (or makes it, ``ahead``)
        and has the session fold it; ``catch_up``
        folds what others recorded since; ``deliver`` hands a task it started, or an abort of
        the running one, to the task's conversation; ``refusal`` says why the log took
        nothing, if the session failed or was lost (else it is being closed);
        ``when_durable(then)`` calls ``then`` once what was made ahead is written (``None``),
        or with why it was not (the conversation a task is delivered to writes it); ``gate``
        gives the run slot a task starts in, and ``wake`` is called once one waited for is
        held (the Session tells itself ``StartNext``)."""
        self.stream = stream
        self.tasks = tasks
        self._record = record
        self._catch_up = catch_up
        self._deliver = deliver
        self._refusal = refusal
        self._when_durable = when_durable or (lambda then: then(None))
        self._stopped = False  # the process stops: what waits is left for the next owner
        self._slot = None if gate is None else RunSlot(gate, stream, wake, self._when_durable)

    def receive(self, message: object) -> object:
        """Handle one of ``MESSAGES``; what it raises stops the session (the Session reports
        it, docs/failures.md#supervision), and fails the ``Enqueue``'s ack with it."""
        match message:
            case Enqueue(plans=plans, ack=ack, once=once):
                if once:
                    with self.tasks() as queue:
                        plans = tuple(p for p in plans if p.task_id not in queue.known)
                recorded = self._enqueue(plans) if plans else True  # held: durable with it
                if ack is not None and recorded:
                    self._when_durable(ack)  # acknowledged once durable, never before
                elif ack is not None:
                    ack(self._refusal() or SessionClosedError(self.stream))
            case TaskEnded():
                self._maybe_start()
            case Interrupt(cause=cause):
                self._interrupt(cause)
            case GetQueue():
                with self.tasks() as queue:
                    return queue.snapshot()
            case StartNext():
                self._maybe_start()
            case Stop(detail=detail, at_checkpoint=at_checkpoint):
                self._stopped = True
                with self.tasks() as queue:
                    running = queue.running
                if running is not None:
                    task = running.task_id
                    self._deliver(
                        Abort(task, "interrupted", "shutdown", detail, at_checkpoint=at_checkpoint)
                    )
        return None

    def _enqueue(self, plans: tuple[TaskPlan, ...]) -> bool:
        """Queue ``plans``; if the timeline is free, start the next task in the same
        transaction (one fsync for both). Whether they were recorded (not, once the session
        is being stopped)."""
        queued = [NewEvent(TaskEnqueued(p), p.conversation_id, p.task_id) for p in plans]
        nxt = None
        with self.tasks() as queue:
            if queue.running is None:
                nxt = queue.pending[0] if queue.pending else plans[0]
        recorded = self._start(nxt, queued)
        # The running task may have ended meanwhile, and told no one: nothing waited then.
        self._catch_up()
        self._maybe_start()
        return bool(recorded)

    def _maybe_start(self) -> None:
        with self.tasks() as queue:
            plan = next_task(queue)
        self._start(plan, [])

    def _start(self, plan: TaskPlan | None, before: list[NewEvent]) -> list[Event]:
        """Start ``plan`` (if any), recording ``before`` with it; return what was recorded
        (made ahead, when a task starts: its conversation writes it)."""
        if self._slot is not None:
            with self.tasks() as queue:
                idle = queue.running is None
            if idle:  # docs/processes.md#capacity
                plan = self._slot.take(plan, self._stopped)
        if plan is None or self._stopped:
            return self._record(before) if before else []
        started = [NewEvent(TaskStarted(), plan.conversation_id, plan.task_id)]
        with self.tasks() as queue:  # before TaskStarted forgets the result
            output = continuation_output(queue, plan)
        if plan.closure is not None and output is not None:
            # A continuation starts by answering the call it closes, in the same group: a
            # crash keeps both or neither.
            answer = ToolCallCompleted(plan.closure.call_id, output)
            started.append(NewEvent(answer, plan.conversation_id, plan.task_id))
        # Made ahead: the conversation builds its first request from these events, sends it,
        # then writes them with its own (docs/event-log.md#writing-ahead).
        recorded = self._record([*before, *started], ahead=True)
        if recorded:
            self._deliver(RunTask(plan))
        return recorded

    def _interrupt(self, cause: InterruptCause) -> None:
        why = INTERRUPTED_BY[cause]
        dropped: list[NewEvent] = []
        with self.tasks() as queue:
            chain = chain_to_drop(queue)
        for plan in chain:
            if plan.closure is not None:
                # The call this continuation would have answered is answered now, so the
                # caller's history stays valid for its next model request.
                output = ToolCallCompleted(
                    plan.closure.call_id, "aborted: interrupted", "error", aborted_by=cause
                )
                dropped.append(NewEvent(output, plan.conversation_id, plan.task_id))
            reason = TaskDropped(why, cause)
            dropped.append(NewEvent(reason, plan.conversation_id, plan.task_id))
        if dropped:
            self._record(dropped)
        with self.tasks() as queue:
            running = queue.running
        if running is not None:
            self._deliver(Abort(running.task_id, "interrupted", cause, why))
        else:
            self._maybe_start()
