"""Crash recovery: what a resumed session records for the task a crash cut off.

``Runtime.resume`` ends that task ``TurnAborted(crashed)``, after answering each tool call
the crash left open, so the conversation's history stays valid and the model is told what
is known. An MCP call that was sent to its server is run again if its tool is read-only or
idempotent (as the log's tool snapshots say), and its real result recorded; any other call
that may have run has an ``unknown`` outcome; one that never reached its server did not run.

A call run again is recorded ``ToolCallStarted`` a second time, at once, as the first thing
the resumed process records: that is where a replay sees the crash. A call that was waiting
for its approval is denied (``ToolApprovalDecided(decided_by="recovery")``: nobody can say
what would have been decided, so it fails closed) and answered ``refused``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import msgspec

from plait.actors import (
    Actor,
    AwaitServers,
    CallTool,
    Journal,
    JournalLike,
    McpPoolRef,
    Recipient,
    ServersSettled,
    StartNext,
    ToolFinished,
    ToolResult,
    canonical_name,
)
from plait.events import (
    AbortCause,
    Body,
    CallOutcome,
    ConversationOpened,
    Event,
    EventStore,
    McpServerReady,
    McpToolSnapshot,
    McpToolsRefreshed,
    NewEvent,
    SessionClosed,
    SessionResumed,
    SessionStarted,
    TaskDropped,
    TaskPlan,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    as_text,
    last_done,
    recorded_settings,
)
from plait.events.projections import QueueSnapshot, task_queue
from plait.runtime._handoffs import answers_handoffs, fully_recovered, not_run, opened_by

__all__ = [
    "CRASHED",
    "DENIED",
    "FORCED",
    "HANDOFF_CUT",
    "NOT_SENT",
    "UNAPPROVED",
    "UNKNOWN",
    "OpenCalls",
    "Recovery",
    "Rerun",
    "cut_off",
    "forced_close",
    "in_flight",
    "open_calls",
    "records_resumes",
    "running_ended",
    "took_over",
]

NOT_SENT = "not run: the process stopped before this call was sent to its server"
UNKNOWN = (
    "result unknown: the process stopped while this call ran; it may or may not have "
    "taken effect, check before running it again"
)
HANDOFF_CUT = "the task did not run: this call was cut off before it handed the task on"
"""The ``error`` of the answer of a ``conv_create`` or ``conv_send`` call cut off before it
replaced its task (docs/replay.md#crashes)."""
HANDOFFS = ("conv_create", "conv_send")
"""The built-ins that hand the timeline to another task; one cut off queued nothing."""
UNAPPROVED = "not run: it was waiting for its approval when the process stopped; denied"
DENIED = "not run: its approval was denied"
UNDECIDED = "the process stopped before a decision; denied (fail closed)"
"""The reason of the denial recorded for a call whose approval was pending at a crash."""
CRASHED = TurnAborted("crashed", "crash", "the process stopped while the task ran")
"""How a task a crash cut off ends."""
FORCED = "force-aborted: the task did not stop within {timeout:g} s of the {what}"
"""Why a task that did not stop when its session closed ended (``TurnAborted(interrupted)``
with the cause ``forced_close``), for people."""


class OpenCalls(msgspec.Struct, frozen=True):
    """The calls a crash (or a forced close) left open in a task: those to run again, and
    answers for the rest. Frozen: a ``Rerun`` keeps the answers it gets in its own state."""

    cause: AbortCause = "crash"
    """What cut the calls off: ``crash``, or ``forced_close``."""
    requests: tuple[ToolCallRequested, ...] = ()
    """Every open call, in the order the model made them."""
    rerun: tuple[ToolCallStarted, ...] = ()
    """Sent calls of read-only or idempotent tools, as they are started again."""
    known: tuple[ToolCallCompleted, ...] = ()
    """The answers of the calls not run again."""
    denials: tuple[ToolApprovalDecided, ...] = ()
    """The decisions of the calls that were waiting for their approval: denied."""

    def ending(self, end: Body = CRASHED) -> list[Body]:
        """The pending approvals' denials, every open call's answer in the model's order
        (``unknown`` for a call to run again that was not), then the task's ``end``."""
        return [*self.denials, *self.answered(self.answers(), len(self.requests)), end]

    def answers(self) -> dict[str, ToolCallCompleted]:
        """The known answers by call id (a new dict, for the caller to add to)."""
        return {answer.call_id: answer for answer in self.known}

    def answered(self, answers: Mapping[str, ToolCallCompleted], upto: int) -> list[Body]:
        """The answers of the first ``upto`` open calls, in the model's order; a call with
        none in ``answers`` is ``unknown``."""
        return [
            answers.get(r.call_id) or cut_off(r.call_id, UNKNOWN, "unknown", self.cause)
            for r in self.requests[:upto]
        ]

    def ready(self, answers: Mapping[str, ToolCallCompleted]) -> int:
        """How many open calls, from the first, have their answer in ``answers``."""
        count = 0
        for request in self.requests:
            if request.call_id not in answers:
                break
            count += 1
        return count


def cut_off(
    call_id: str, output: str, outcome: CallOutcome, cause: AbortCause
) -> ToolCallCompleted:
    """plait's answer for a call that was cut off, saying what is known of it."""
    return ToolCallCompleted(call_id, output, outcome, aborted_by=cause)


def open_calls(past: Sequence[Event], task_id: str, cause: AbortCause = "crash") -> OpenCalls:
    """Sort the calls a crash left open in ``task_id``.

    A built-in may have run: unknown; but a ``conv_create`` or ``conv_send`` queued nothing
    (it does so as it ends the task), so its answer says its task did not run, with the
    conversation a ``conv_create`` opened (in sessions that do, ``answers_handoffs``: older
    ones resume as they did). An MCP call with no
    ``ToolCallStarted`` never reached its server (nor did a call of a tool that was not
    offered), so it did not run. A started call of a tool the log's snapshot says is
    read-only or idempotent is run again.
    """
    requests: dict[str, ToolCallRequested] = {}
    since: dict[str, Event] = {}  # where each was requested
    started: dict[str, ToolCallStarted] = {}
    tools: dict[str, McpToolSnapshot] = {}
    asked: set[str] = set()
    denied: set[str] = set()
    opened: list[tuple[int, str | None, str | None]] = []  # seq, parent, conversation
    handoffs = HANDOFFS if answers_handoffs(past) else ()
    for event in past:
        body = event.body
        if isinstance(body, McpServerReady | McpToolsRefreshed):
            tools.update((tool.name, tool) for tool in body.tools)
        elif isinstance(body, ConversationOpened):
            opened.append((event.seq, body.parent_id, event.conversation_id))
        if event.task_id != task_id:
            continue
        if isinstance(body, ToolCallRequested):
            requests[body.call_id] = body
            since[body.call_id] = event
        elif isinstance(body, ToolCallStarted):
            started[body.call_id] = body
        elif isinstance(body, ToolCallCompleted):
            requests.pop(body.call_id, None)
        elif isinstance(body, ToolApprovalRequested):
            asked.add(body.call_id)
        elif isinstance(body, ToolApprovalDecided):
            asked.discard(body.call_id)
            if not body.approved:
                denied.add(body.call_id)
    rerun: list[ToolCallStarted] = []
    known: list[ToolCallCompleted] = []
    denials: list[ToolApprovalDecided] = []
    for call_id, request in requests.items():
        tool = tools.get(request.tool)
        if call_id in asked:  # nobody decided: fail closed
            denials.append(ToolApprovalDecided(call_id, False, "recovery", reason=UNDECIDED))
            known.append(cut_off(call_id, UNAPPROVED, "refused", cause))
        elif call_id in denied:  # denied, and the process stopped before the answer
            known.append(cut_off(call_id, DENIED, "refused", cause))
        elif call_id in started and tool is not None and (tool.read_only or tool.idempotent):
            rerun.append(started[call_id])
        elif canonical_name(request.tool) in handoffs:  # it queued nothing: its task did not run
            event = since[call_id]
            made = opened_by(opened, event.seq, event.conversation_id)
            known.append(cut_off(call_id, not_run(request, made, HANDOFF_CUT), "error", cause))
        elif call_id in started or canonical_name(request.tool) is not None:
            known.append(cut_off(call_id, UNKNOWN, "unknown", cause))
        else:
            known.append(cut_off(call_id, NOT_SENT, "error", cause))
    return OpenCalls(cause, tuple(requests.values()), tuple(rerun), tuple(known), tuple(denials))


class Rerun(Actor):
    """Runs the open calls of a crashed task again through the session's pool, records their
    answers in the model's order as they come (as a task's batch does), then the task's end,
    and lets the scheduler go on."""

    def __init__(
        self,
        journal: JournalLike,
        pool: McpPoolRef,
        scheduler: Recipient,
        plan: TaskPlan,
        calls: OpenCalls,
    ) -> None:
        super().__init__()
        self.journal, self.pool, self.scheduler = journal, pool, scheduler
        self.plan, self.calls = plan, calls
        self.answers = calls.answers()
        """Every answer known so far: the calls not run again, and each re-run's once done."""
        self.recorded = 0

    def role(self, message: object) -> str:
        return f"the recovery of task {self.plan.task_id}"

    def startup(self) -> None:
        servers = tuple(sorted({started.server for started in self.calls.rerun}))
        self.pool.tell(AwaitServers(servers, 0, self.actor_ref))

    def receive(self, message: object) -> object:
        match message:
            case ServersSettled():
                requests = {request.call_id: request for request in self.calls.requests}
                for index, started in enumerate(self.calls.rerun):
                    request = requests[started.call_id]
                    self.pool.tell(
                        CallTool(
                            self.plan.conversation_id,
                            self.plan.task_id,
                            started.call_id,
                            0,
                            index,
                            request.tool,
                            as_text(request.arguments) or "",
                            self.actor_ref,
                            start_recorded=True,
                        )
                    )
            case ToolFinished(index=index, result=result):
                call_id = self.calls.rerun[index].call_id
                self.answers[call_id] = self._completed(call_id, result)
                self._record()
        return None

    def _record(self) -> None:
        ready = self.calls.ready(self.answers)
        bodies = self.calls.answered(self.answers, ready)[self.recorded :]
        self.recorded = ready
        done = ready == len(self.calls.requests)
        if done:
            bodies.append(CRASHED)
        plan = self.plan
        if bodies:
            self.journal.record([NewEvent(b, plan.conversation_id, plan.task_id) for b in bodies])
        if done:
            self.scheduler.tell(StartNext())
            self.stop()

    def _completed(self, call_id: str, result: ToolResult) -> ToolCallCompleted:
        if result.outcome == "refused":  # not run again (its server or tool is gone): unknown
            return cut_off(call_id, UNKNOWN, "unknown", self.calls.cause)
        return result.completed(call_id)


class Recovery(msgspec.Struct, frozen=True):
    """A session ``Runtime.recover`` found in flight."""

    session_id: str
    """The session."""
    crashed_task: str | None
    """The task the process stopped in, now ended ``crashed``; ``None`` if none ran."""
    waiting: int
    """Tasks that were waiting to run; they run now, in order, if the session resumed."""
    not_resumed: str = ""
    """Why the session was not resumed (empty when it was)."""


def forced_close(past: Sequence[Event], timeout: float, what: str = "close") -> list[NewEvent]:
    """What ends the task that ``past`` shows running when its session's close (or stop)
    gave up on it after ``timeout`` seconds (nothing, if none runs): its open calls' answers,
    then ``TurnAborted(interrupted)`` with the cause ``forced_close``."""
    detail = FORCED.format(timeout=timeout, what=what)
    forced = TurnAborted("interrupted", "forced_close", detail)
    return running_ended(past, forced)


def running_ended(past: Sequence[Event], end: TurnAborted) -> list[NewEvent]:
    """What ends the task ``past`` shows running, outside its actors (nothing, if none runs):
    its open calls' answers (for the cause of ``end``), then ``end``."""
    plan = task_queue(past).running
    if plan is None:
        return []
    bodies = open_calls(past, plan.task_id, end.cause).ending(end)
    return [NewEvent(body, plan.conversation_id, plan.task_id) for body in bodies]


def in_flight(store: EventStore) -> Iterator[tuple[str, list[Event], QueueSnapshot]]:
    """The sessions of ``store`` left open with a task running or waiting, with their events
    and their scheduler's state: what ``Runtime.recover`` resumes."""
    for info in store.streams():
        past = store.read(info.stream)
        if not past or not isinstance(past[0].body, SessionStarted):
            continue  # not a session
        state = task_queue(past).snapshot()
        if not state.idle and not isinstance(last_done(past).body, SessionClosed):
            yield info.stream, past, state


def records_resumes(past: Sequence[Event]) -> bool:
    """Whether the session of ``past`` records ``SessionResumed`` where a process takes it
    over: it was started recording ``RecordedSettings.resume_markers``, or forked since forks
    do (``ForkOrigin.full_recovery``)."""
    settings = recorded_settings(past)
    return (settings is not None and settings.resume_markers) or fully_recovered(past)


def took_over(
    journal: Journal,
    past: Sequence[Event],
    state: QueueSnapshot,
    bodies: Sequence[Body],
    cut: Sequence[NewEvent] = (),
) -> list[Event]:
    """Record ``SessionResumed`` (if the session records it), the answers of the hand-offs
    a cut left open (``cut``: ``handoffs.cut_handoffs``), then ``bodies`` in the running task
    (the recovery of the task a crash cut off), as one group."""
    plan = state.running
    ids = (plan.conversation_id, plan.task_id) if plan else (None, None)
    items = [*cut, *(NewEvent(b, *ids) for b in bodies)]
    if records_resumes(past):
        dropped = sum(isinstance(item.body, TaskDropped) for item in cut)
        marker = SessionResumed(plan.task_id if plan else None, len(state.pending) - dropped)
        items.insert(0, NewEvent(marker))
    return journal.record(items, signed=True) if items else []
