"""What in a recorded log came from outside the program, read from the events' causes.

A replay feeds these in when their turn comes and compares everything else
(docs/replay.md#what-replay-feeds-in). Each question is answered from typed fields (a
``cause``, a ``decided_by``, a ``SessionResumed`` marker) and the log's structure, never from
the text of an event.
"""

from __future__ import annotations

from collections.abc import Container

import msgspec

from plait.actors import ConvCreate, IdFor, parse_arguments
from plait.events import (
    AbortCause,
    Body,
    ContentErased,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    HeadSigned,
    InterruptCause,
    McpAllowlistNormalized,
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolsRefreshed,
    McpToolWithheld,
    NewEvent,
    SessionResumed,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    ToolApprovalDecided,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
    as_text,
)

__all__ = [
    "LIFECYCLE",
    "NOT_THE_PROGRAMS",
    "crash_points",
    "cut_off",
    "forced_closes",
    "interrupt_cause",
    "is_lifecycle",
    "made_ids",
    "outside_destroy",
    "program_seq",
    "read_instructions",
    "recorded_only",
    "submitted",
    "submitted_task",
]

LIFECYCLE = (
    McpServerReady,
    McpServerFailed,
    McpToolsRefreshed,
    McpToolWithheld,
    McpServersOffered,
)
"""What MCP servers did (and the pool made of it), and which servers a run had: not the
program's doing, and a server's report lands among the program's events as it happened (a
race); replay feeds them in and compares them apart."""


def is_lifecycle(body: Body) -> bool:
    """Whether ``body`` reports what an MCP server did (see ``LIFECYCLE``)."""
    return isinstance(body, LIFECYCLE)


def submitted(body: TaskEnqueued) -> bool:
    """Whether the task was submitted from outside (the program queues the others first)."""
    return not body.front and body.plan.closure is None


def submitted_task(item: Body | NewEvent) -> str | None:
    """The task ``item`` queues, if it is a task submitted from outside."""
    body = item.body if isinstance(item, NewEvent) else item
    return body.plan.task_id if isinstance(body, TaskEnqueued) and submitted(body) else None


def cut_off(body: Body) -> bool:
    """Whether ``body`` answers (or denies) a call that a crash or a forced close cut off."""
    if isinstance(body, ToolApprovalDecided):
        return body.decided_by == "recovery"
    return isinstance(body, ToolCallCompleted) and body.aborted_by in ("crash", "forced_close")


def forced_closes(recorded: list[Event]) -> dict[int, list[Event]]:
    """The groups a close recorded for a task that did not stop, by their first seq: the
    answers to its open calls, then its ``TurnAborted(forced_close)``. They came from outside
    the program (it was stuck), like a crash's."""
    forced: dict[int, list[Event]] = {}
    for index, event in enumerate(recorded):
        body = event.body
        if not (isinstance(body, TurnAborted) and body.cause == "forced_close"):
            continue
        first = index
        while (
            first > 0
            and (before := recorded[first - 1]).task_id == event.task_id
            and cut_off(before.body)
        ):
            first -= 1
        forced[recorded[first].seq] = recorded[first : index + 1]
    return forced


def crash_points(recorded: list[Event], closing: Container[int] = ()) -> list[int]:
    """The seqs where a resumed process began to record.

    A session that records ``SessionResumed`` says so: each marker is one. Before markers
    were recorded (``RecordedSettings.resume_markers``, ``ForkOrigin.full_recovery``), a
    recovery is known by what it records first: a call run again (started a second time),
    an answer for a call the crash cut off, or the crashed task's end; until that
    ``TurnAborted(crash)``, the events of the task it ends are the recovery's, not a new
    crash. The events of a forced close
    (``closing``) look alike and are not a crash.
    """
    from plait.runtime import records_resumes  # the runtime: only when replaying

    if records_resumes(recorded):
        return [e.seq for e in recorded if isinstance(e.body, SessionResumed)]
    points: list[int] = []
    running: set[str] = set()
    recovering: str | None = None
    for event in recorded:
        body = event.body
        crashed = isinstance(body, TurnAborted) and body.cause == "crash"
        if event.seq in closing:
            pass
        elif recovering is not None:
            if crashed and event.task_id == recovering:
                recovering = None
        elif (
            crashed
            or cut_off(body)
            or (isinstance(body, ToolCallStarted) and body.call_id in running)  # run again
        ):
            points.append(event.seq)
            recovering = None if crashed else event.task_id
        if isinstance(body, ToolCallStarted):
            running.add(body.call_id)
        elif isinstance(body, ToolCallCompleted):
            running.discard(body.call_id)
    return points


def _interrupting(body: Body) -> InterruptCause | None:
    """The interrupt's cause, if ``body`` is one of the records an interrupt makes."""
    if isinstance(body, TaskDropped | TurnAborted):
        cause: AbortCause | None = body.cause
    elif isinstance(body, ToolCallCompleted):
        cause = body.aborted_by
    else:
        return None
    return "user" if cause == "user" else "close" if cause == "close" else None


def interrupt_cause(event: Event, previous: Event | None) -> InterruptCause | None:
    """``user`` or ``close`` if ``event`` is the first record of an interrupt (what it drops,
    the answers of the calls it cuts off, or the abort), else ``None``."""
    cause = _interrupting(event.body)
    if cause is None or (previous is not None and _interrupting(previous.body) == cause):
        return None
    return cause


def _destroying(event: Event) -> bool:
    body = event.body
    if isinstance(body, TaskDropped | TurnAborted):
        return body.cause == "destroy"
    return isinstance(body, ConversationDestroyed)


def outside_destroy(event: Event, previous: Event, by_tool: bool) -> bool:
    """Whether ``event`` is the first record of a destroy by the embedder; ``by_tool``: a
    ``conv_destroy`` call is open, whose destroy the program makes by itself."""
    before = previous.body
    follows = (
        previous.conversation_id == event.conversation_id
        and isinstance(before, TaskDropped | TurnAborted)
        and before.cause == "destroy"
    )
    return _destroying(event) and not by_tool and not follows


def made_ids(recorded: list[Event]) -> dict[IdFor, str]:
    """The id the program made for each thing a ``conv_create`` or ``conv_send`` call made, as
    the log shows them: a continuation's plan names its call, the target task and (for
    ``conv_create``) the conversation; the caller's ``TurnAborted(replaced)`` names its task."""
    awaiting: dict[tuple[str | None, str], str] = {}  # (conversation, call) -> the caller task
    ids: dict[IdFor, str] = {}
    for event in recorded:
        body = event.body
        if isinstance(body, TurnAborted) and body.cause == "replaced" and event.task_id:
            for call_id in body.awaiting_call_ids:
                awaiting[(event.conversation_id, call_id)] = event.task_id
        elif isinstance(body, TaskEnqueued) and body.plan.closure is not None:
            closure = body.plan.closure
            caller = awaiting.get((body.plan.conversation_id, closure.call_id))
            if caller is None:
                continue
            ids[IdFor("continuation", caller, closure.call_id)] = body.plan.task_id
            if closure.target_task_id is not None:
                ids[IdFor("task", caller, closure.call_id)] = closure.target_task_id
            if closure.tool_name == "conv_create" and closure.target_conversation_id:
                made = IdFor("conversation", caller, closure.call_id)
                ids[made] = closure.target_conversation_id
    return ids


def read_instructions(recorded: list[Event]) -> dict[IdFor, str | None]:
    """What each ``conv_create`` call that named a ``base_instruction_file`` read, as the log
    shows it: the instructions of the conversation it opened, or ``!`` and why the call was
    refused; ``None`` where the log shows no outcome (the process stopped during the read).

    A task's calls run one at a time, in order: what the log records next for the task
    belongs to the first of its calls with no outcome yet.
    """
    read: dict[IdFor, str | None] = {}
    waiting: dict[str, list[IdFor]] = {}  # task -> its calls with no outcome yet, in order
    calling: dict[str | None, str] = {}  # conversation -> the task whose calls it last made
    for event in recorded:
        body, task = event.body, event.task_id or ""
        if isinstance(body, ConversationOpened):  # recorded in the new conversation alone
            task = calling.get(body.parent_id, "")
        first = waiting[task][0] if waiting.get(task) else None
        if isinstance(body, ToolCallRequested):
            calling[event.conversation_id] = task
        if isinstance(body, ToolCallRequested) and body.tool == "conv_create":
            # Parsed as the program parses them: it reads a file only if they name one.
            parsed = parse_arguments(body.tool, as_text(body.arguments) or "{}")
            if isinstance(parsed, ConvCreate) and parsed.base_instruction_file is not None:
                made = IdFor("conversation", task, body.call_id)
                read[made] = None
                waiting.setdefault(task, []).append(made)
        elif first is not None and isinstance(body, ConversationOpened):
            read[first] = as_text(body.base_instructions) or ""
        elif first is not None and isinstance(body, McpAllowlistNormalized):
            read[first] = ""  # it was read (its text is not kept): the allowlist came next
        elif isinstance(body, ToolCallCompleted) and body.aborted_by is None:
            made = IdFor("conversation", task, body.call_id)
            if made in waiting.get(task, []):
                waiting[task].remove(made)
                if read[made] is None:
                    reason = _refusal(as_text(body.output))
                    read[made] = None if reason is None else f"!{reason}"
        if isinstance(body, TurnAborted) and body.cause == "replaced" and first is not None:
            waiting[task].remove(first)  # it opened its conversation and replaced the task
        if isinstance(body, TaskCompleted | TurnAborted):
            waiting.pop(task, None)
    return read


class _Refused(msgspec.Struct):
    reason: str


def _refusal(output: str | None) -> str | None:
    """The ``reason`` of a refused ``conv_create`` (``{"ok": false, "reason": ...}``)."""
    try:
        return msgspec.json.decode(output or "", type=_Refused).reason
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


NOT_THE_PROGRAMS = (HeadSigned, ContentErased)
"""What a replay takes as recorded and never makes: a signed head (the key's), an erasure
(a request's)."""


def recorded_only(body: Body) -> bool:
    """Whether ``body`` is not the program's: a server's report, a signed head, an erasure."""
    return is_lifecycle(body) or isinstance(body, NOT_THE_PROGRAMS)


def program_seq(recorded: list[Event], given: int, seq: int) -> int:
    """Where the recorded ``seq`` lands in the replayed log: the signed heads and erasures
    recorded after what was given, which the replay does not make, are not in it."""
    return seq - sum(1 for e in recorded[given : seq - 1] if isinstance(e.body, NOT_THE_PROGRAMS))
