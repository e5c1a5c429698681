"""What a live rerun changed, task by task: answers, tool calls, tokens, time, and the first
reply where the runs part (docs/replay.md#the-report)."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from plait.events import (
    Event,
    InputText,
    ModelResponded,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TokensCounted,
    ToolCallRequested,
)
from plait.replay._answers import CallKey, call_key
from plait.replay._inference import submitted

__all__ = [
    "Call",
    "CallChange",
    "Chain",
    "FailOn",
    "RerunReport",
    "TaskReport",
    "chains",
    "compare",
]

FailOn = Literal["tools", "answers", "any"]
DIFF_LINES = 12
"""Lines of a differing answer's diff the report keeps."""


class Call(msgspec.Struct, frozen=True):
    """A tool call as a rerun compares it."""

    tool: str
    """Its fully-qualified name."""
    arguments: str
    """Its arguments, as canonical JSON (keys sorted), or as sent if not JSON."""


class CallChange(msgspec.Struct, frozen=True):
    """A tool both runs called, with other arguments."""

    tool: str
    recorded: str
    """The original's arguments."""
    rerun: str
    """The rerun's."""


class TaskReport(msgspec.Struct, frozen=True):
    """One task submitted to the original, and what the rerun made of it."""

    index: int
    """1 for the session's first submitted task."""
    task_id: str
    """The original's task."""
    rerun_task_id: str | None
    """The rerun's (``None``: it was not run, ``error`` says why)."""
    prompt: str
    """Its text input, as submitted."""
    recorded_answer: str | None
    """The original's final answer (``None``: it gave none)."""
    rerun_answer: str | None
    """The rerun's."""
    similarity: float
    """How alike the answers are, 0 to 1 (difflib's ratio)."""
    diff: list[str]
    """A short unified diff of the answers (empty when they are the same)."""
    added: list[Call]
    """Calls the rerun made and the original did not."""
    removed: list[Call]
    """Calls the original made and the rerun did not."""
    changed: list[CallChange]
    """Calls of one tool with other arguments."""
    from_log: int
    """The rerun's calls answered from the original's log."""
    not_recorded: int
    """The rerun's calls the original never made."""
    recorded_tokens: int
    """Tokens of the original's task and what it led to."""
    rerun_tokens: int
    recorded_ms: float
    """Wall time from its start to its last event, as recorded."""
    rerun_ms: float
    divergence: str | None
    """The first model reply where the runs part; ``None``: none."""
    status: str = "completed"
    """How the rerun's task ended."""
    error: str | None = None
    """Why it could not be rerun."""

    @property
    def same_answer(self) -> bool:
        return self.error is None and self.recorded_answer == self.rerun_answer

    @property
    def same_tools(self) -> bool:
        return self.error is None and not (self.added or self.removed or self.changed)

    def differs(self, on: FailOn = "any") -> bool:
        """Whether its tool calls (``tools``), its answer (``answers``), or either (``any``)
        differ, or it could not be rerun."""
        if self.error is not None:
            return True
        return (on != "answers" and not self.same_tools) or (on != "tools" and not self.same_answer)


class RerunReport(msgspec.Struct, frozen=True):
    """A recorded session run again against a live model."""

    session_id: str
    """The original."""
    rerun_session_id: str | None
    """The rerun, stored as a fork of the original (``None``: not saved)."""
    model: str
    """The model the rerun asked for."""
    base_url: str
    """Where it was sent."""
    tasks: list[TaskReport]
    """One per task submitted to the original, in order."""

    def differs(self, on: FailOn = "any") -> bool:
        """Whether any task's tool calls (``tools``), answers (``answers``), or either
        (``any``) differ, or a task could not be rerun."""
        return any(task.differs(on) for task in self.tasks)


@dataclass
class Chain:
    """A submitted task and everything it led to, up to the next submitted task."""

    plan: TaskPlan
    events: list[Event]

    @property
    def answer(self) -> str | None:
        completed = [
            e.body
            for e in self.events
            if isinstance(e.body, TaskCompleted) and e.conversation_id == self.plan.conversation_id
        ]
        last = completed[-1].last_assistant_message if completed else None
        return last if isinstance(last, str) else None

    @property
    def calls(self) -> list[CallKey]:
        return [
            call_key(e.body.tool, e.body.arguments)
            for e in self.events
            if isinstance(e.body, ToolCallRequested) and isinstance(e.body.arguments, str)
        ]

    @property
    def replies(self) -> list[tuple[str, tuple[CallKey, ...]]]:
        found = []
        for event in self.events:
            body = event.body
            if isinstance(body, ModelResponded):
                text = body.text if isinstance(body.text, str) else ""
                keys = tuple(
                    call_key(c.name, c.arguments if isinstance(c.arguments, str) else "")
                    for c in body.tool_calls
                )
                found.append((text, keys))
        return found

    @property
    def tokens(self) -> int:
        return sum(e.body.usage.total_tokens for e in self.events if type(e.body) is TokensCounted)

    @property
    def ms(self) -> float:
        if not self.events:
            return 0.0
        return (self.events[-1].at - self.events[0].at).total_seconds() * 1000

    @property
    def prompt(self) -> str:
        texts = [i.text for i in self.plan.input_items if isinstance(i, InputText)]
        return "\n".join(t for t in texts if isinstance(t, str))


def chains(events: Sequence[Event]) -> list[Chain]:
    """The session's submitted tasks, each with what it led to."""
    plans = {
        e.body.plan.task_id: e.body.plan
        for e in events
        if isinstance(e.body, TaskEnqueued) and submitted(e.body)
    }
    found: list[Chain] = []
    for event in events:
        if isinstance(event.body, TaskStarted) and event.task_id in plans:
            found.append(Chain(plans[event.task_id], []))
        if found:
            found[-1].events.append(event)
    return found


def _describe(reply: tuple[str, tuple[CallKey, ...]] | None) -> str:
    if reply is None:
        return "no reply"
    text, calls = reply
    if calls:
        return "calls " + ", ".join(f"{tool}({arguments})" for tool, arguments in calls)
    short = text if len(text) <= 60 else text[:57] + "..."
    return f"answers {short!r}"


def _divergence(recorded: Chain, rerun: Chain) -> str | None:
    a, b = recorded.replies, rerun.replies
    for n in range(max(len(a), len(b))):
        mine = a[n] if n < len(a) else None
        theirs = b[n] if n < len(b) else None
        if mine != theirs:
            return f"reply {n + 1}: recorded {_describe(mine)}; rerun {_describe(theirs)}"
    return None


def _calls(recorded: Chain, rerun: Chain) -> tuple[list[Call], list[Call], list[CallChange]]:
    before, after = Counter(recorded.calls), Counter(rerun.calls)
    removed = list((before - after).elements())
    added = list((after - before).elements())
    changed: list[CallChange] = []
    for tool, arguments in list(removed):
        match = next((c for c in added if c[0] == tool), None)
        if match is not None:
            removed.remove((tool, arguments))
            added.remove(match)
            changed.append(CallChange(tool, arguments, match[1]))
    return [Call(*c) for c in added], [Call(*c) for c in removed], changed


def compare(
    index: int,
    recorded: Chain,
    rerun: Chain | None,
    *,
    from_log: set[str],
    not_recorded: set[str],
    status: str = "completed",
    error: str | None = None,
) -> TaskReport:
    """Report on one task: the original's ``recorded`` chain and the rerun's."""
    if rerun is None:
        return TaskReport(
            index=index,
            task_id=recorded.plan.task_id,
            rerun_task_id=None,
            prompt=recorded.prompt,
            recorded_answer=recorded.answer,
            rerun_answer=None,
            similarity=0.0,
            diff=[],
            added=[],
            removed=[],
            changed=[],
            from_log=0,
            not_recorded=0,
            recorded_tokens=recorded.tokens,
            rerun_tokens=0,
            recorded_ms=recorded.ms,
            rerun_ms=0.0,
            divergence=None,
            status="not run",
            error=error,
        )
    mine, theirs = recorded.answer, rerun.answer
    ratio = difflib.SequenceMatcher(None, mine or "", theirs or "").ratio()
    diff = []
    if mine != theirs:
        lines = difflib.unified_diff(
            (mine or "").splitlines(), (theirs or "").splitlines(), "recorded", "rerun", lineterm=""
        )
        diff = list(lines)[:DIFF_LINES]
    added, removed, changed = _calls(recorded, rerun)
    ids = {e.body.call_id for e in rerun.events if isinstance(e.body, ToolCallRequested)}
    return TaskReport(
        index,
        recorded.plan.task_id,
        rerun.plan.task_id,
        recorded.prompt,
        mine,
        theirs,
        round(ratio, 3),
        diff,
        added,
        removed,
        changed,
        len(ids & from_log),
        len(ids & not_recorded),
        recorded.tokens,
        rerun.tokens,
        round(recorded.ms, 1),
        round(rerun.ms, 1),
        _divergence(recorded, rerun),
        status,
        error,
    )
