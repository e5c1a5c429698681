"""Deterministic replay: run the same actors again, answered from the log, and compare.

The driver walks the recorded events in order. What came from outside the program — a task
the user submitted, a user interrupt or destroy, the close, an MCP server's lifecycle, a model
reply or failure, an MCP tool result, an approval decided outside it (by the approver, for
want of one, by its timeout) — it feeds in when its turn comes (model and tool calls and
approvals wait for it: ``ReplayModel``, ``ReplayServers``, ``ReplayApprovals``; the approver
is never called). Everything else (an approval by a remembered key too) the program must
produce by itself, and each produced event is compared with the recorded one at the same
seq. The first difference stops the replay with a report; no network, no API key, no MCP
server is needed.

Time comes from the log too: the replay's store stamps event n with the time event n was
recorded, so whatever the program derives from it (``last_active_at``...) is the same. Not
compared: the measured ``duration_ms`` of a call.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import deque
from collections.abc import Container, Sequence
from typing import Any

import msgspec

from plait.actors.mcp.calls import CallResult, Outcome
from plait.actors.mcp.config import McpServerConfig
from plait.actors.messages import Enqueue
from plait.actors.model import AttemptFailed, ModelReply, ModelSettings
from plait.actors.pool import McpLimits
from plait.errors import ContentUnavailableError, DivergenceError, ReplayError
from plait.events.storage import missing_content
from plait.events.store import EventStore, PreparedAppend, utc_now
from plait.events.stores.memory import MemoryStore
from plait.events.subscription import Subscription
from plait.events.types import (
    Body,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    McpServerFailed,
    McpServerReady,
    McpToolsRefreshed,
    McpToolWithheld,
    ModelRequestFailed,
    ModelResponded,
    NewEvent,
    SessionClosed,
    SessionStarted,
    TaskDropped,
    TaskEnqueued,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.values import HistorySettings, InputImage, RuntimeSettings
from plait.replay.effects import ReplayApprovals, ReplayModel, ReplayServers
from plait.replay.recovery import DENIED, FORCED, NOT_SENT, UNAPPROVED, UNKNOWN

__all__ = ["Divergence", "ReplayResult", "replay"]

BY_USER = "interrupted by the user"
DESTROYED = "conversation destroyed"
IGNORED_FIELDS = frozenset({"duration_ms", "model"})
"""Not the program's decisions, so not compared: measurements, and the model name, which the
runtime is given at each start or resume (a resume may name another)."""


class Divergence(msgspec.Struct, frozen=True):
    """Where a replay first differed from the log."""

    session_id: str
    """The session replayed."""
    seq: int
    """The seq of the recorded event that was not reproduced."""
    conversation_id: str | None
    """Its conversation."""
    expected: str
    """The recorded event, one line."""
    got: str
    """What the program produced instead (``nothing`` if it produced nothing)."""
    fields: dict[str, list[Any]] = {}
    """Each differing field: ``[expected, got]``."""

    def message(self) -> str:
        """Say where and what, for people."""
        where = f"session {self.session_id} seq {self.seq}"
        if self.conversation_id:
            where += f" (conversation {self.conversation_id})"
        detail = "".join(
            f"\n  {k}: expected {v[0]!r}, got {v[1]!r}" for k, v in self.fields.items()
        )
        return f"{where}: expected {self.expected}, got {self.got}{detail}"


class ReplayResult(msgspec.Struct, frozen=True):
    """How a replay went."""

    session_id: str
    """The session replayed."""
    events: int
    """Recorded events reproduced and equal."""
    total: int
    """Recorded events in the session."""
    divergence: Divergence | None = None
    """The first difference, if any."""

    @property
    def ok(self) -> bool:
        """Whether every recorded event was reproduced."""
        return self.divergence is None


def replay(
    store: EventStore,
    session_id: str,
    *,
    timeout: float = 10.0,
    raise_on_divergence: bool = False,
    max_interrupt_chain_depth: int | None = None,
    mcp_limits: McpLimits | None = None,
    workdir: str | None = None,
) -> ReplayResult:
    """Replay ``session_id`` from ``store`` and compare every event it produces.

    The program is configured as the session's ``SessionStarted.settings`` recorded; a given
    ``max_interrupt_chain_depth``, ``mcp_limits`` or ``workdir`` (where ``base_instruction_file``
    is read) overrides it, to see how a changed program would have run, or to supply what
    older logs did not record. ``timeout`` bounds the wait for each event the program should
    produce. With
    ``raise_on_divergence`` a difference raises ``DivergenceError`` (its ``divergence``
    attribute holds the report) instead of being returned.
    """
    recorded = store.read(session_id)
    if not recorded or not isinstance(recorded[0].body, SessionStarted):
        raise ReplayError(f"no session {session_id} in the store")
    missing = missing_content(recorded)
    if missing:
        raise ContentUnavailableError(session_id, "replay", missing)
    started = recorded[0].body
    assert isinstance(started, SessionStarted)
    kept = started.settings or RuntimeSettings()
    if mcp_limits is None and started.settings is not None:
        mcp_limits = McpLimits(
            kept.mcp_per_session,
            kept.mcp_per_conversation,
            kept.mcp_per_conversation_rate,
            kept.mcp_rate_window_sec,
        )
    program = _Program(
        kept.max_interrupt_chain_depth
        if max_interrupt_chain_depth is None
        else max_interrupt_chain_depth,
        mcp_limits,
        workdir if workdir is not None else kept.workdir or ".",
        kept.history,
    )
    result = _Driver(recorded, timeout, program).run()
    if raise_on_divergence and result.divergence is not None:
        error = DivergenceError(result.divergence.message())
        error.divergence = result.divergence  # type: ignore[attr-defined]
        raise error
    return result


LIFECYCLE = (McpServerReady, McpServerFailed, McpToolsRefreshed, McpToolWithheld)
"""What MCP servers did (and the pool made of it): recorded as it happened, so its place among
the program's events is a race; replay compares it apart from them."""


def _lifecycle(body: Body) -> bool:
    return isinstance(body, LIFECYCLE)


CUT_OFF = (UNKNOWN, NOT_SENT, UNAPPROVED, DENIED)
"""What a recovery answers the calls a crash cut off with."""


def _forced_closes(recorded: list[Event]) -> dict[int, list[Event]]:
    """The groups a close recorded for a task that did not stop, by their first seq: the
    answers to its open calls, then its ``TurnAborted``. They came from outside the program
    (it was stuck), like a crash's."""
    forced: dict[int, list[Event]] = {}
    prefix = FORCED.split("{", 1)[0]
    for index, event in enumerate(recorded):
        body = event.body
        if not (isinstance(body, TurnAborted) and body.detail.startswith(prefix)):
            continue
        first = index
        while (
            first > 0
            and (before := recorded[first - 1]).task_id == event.task_id
            and _cut_off(before.body)
        ):
            first -= 1
        forced[recorded[first].seq] = recorded[first : index + 1]
    return forced


def _cut_off(body: Body) -> bool:
    """Whether ``body`` answers (or denies) a call that a crash or a close cut off."""
    if isinstance(body, ToolApprovalDecided):
        return body.decided_by == "recovery"
    return isinstance(body, ToolCallCompleted) and body.output in CUT_OFF


def _crash_points(recorded: list[Event], closing: Container[int] = ()) -> list[int]:
    """The seqs where a resumed process began to record: the first event of each recovery.

    A recovery starts with a call run again (started a second time), an answer saying the
    crash cut a call off, or the crashed task's end; until that ``TurnAborted(crashed)``,
    the events of the task it ends are the recovery's, not a new crash. The events of a
    forced close (``closing``) look alike and are not a crash.
    """
    points: list[int] = []
    started: set[str] = set()
    recovering: str | None = None
    for event in recorded:
        body = event.body
        crashed = isinstance(body, TurnAborted) and body.reason == "crashed"
        if event.seq in closing:
            pass
        elif recovering is not None:
            if crashed and event.task_id == recovering:
                recovering = None
        elif (
            crashed
            or _cut_off(body)
            or (isinstance(body, ToolCallStarted) and body.call_id in started)  # run again
        ):
            points.append(event.seq)
            recovering = None if crashed else event.task_id
        if isinstance(body, ToolCallStarted):
            started.add(body.call_id)
        elif isinstance(body, ToolCallCompleted):
            started.discard(body.call_id)
    return points


class _RecordedTime(MemoryStore):
    """A memory store whose clock is the log's: the n-th event of the program gets the time
    the n-th was recorded at, and a server's event the time it was recorded at.

    It also stops the program where the recorded process stopped: from a crash point on,
    nothing is stored (the program runs on, unheard) until ``release`` lets the resumed
    program record its recovery there.
    """

    def __init__(self, recorded: list[Event], crash_points: list[int]) -> None:
        super().__init__()
        self._program = [e.at for e in recorded if not _lifecycle(e.body)]
        self._servers = [(e.body, e.at) for e in recorded if _lifecycle(e.body)]
        self._count = 0
        self._halts = list(crash_points)
        self._halted = False
        self._halt_lock = threading.Lock()

    def append(
        self, stream: str, events: Sequence[Body | NewEvent], expected_seq: int
    ) -> list[Event]:
        with self._halt_lock:
            last = expected_seq + len(events)
            halt = next((seq for seq in self._halts if expected_seq < seq <= last), None)
            if self._halted or halt is None:
                kept = 0 if self._halted else len(events)
            else:
                kept, self._halted = halt - expected_seq - 1, True
        stored = super().append(stream, events[:kept], expected_seq) if kept else []
        unheard = [self._draft(stream, item) for item in events[kept:]]
        after, now = expected_seq + kept, utc_now()
        return stored + [d.unstored(stream, after + i, now) for i, d in enumerate(unheard, 1)]

    def release(self) -> None:
        """The program was stopped where the process stopped: let the resumed one record."""
        with self._halt_lock:
            self._halted = False
            if self._halts:
                self._halts.pop(0)

    def _prepare(
        self, stream: str, drafts: list[NewEvent], head_seq: int, head_hash: bytes
    ) -> PreparedAppend:
        timed = [msgspec.structs.replace(draft, at=self._time(draft.body)) for draft in drafts]
        return super()._prepare(stream, timed, head_seq, head_hash)

    def _time(self, body: Body) -> Any:
        if _lifecycle(body):
            for i, (recorded, at) in enumerate(self._servers):
                if recorded == body:
                    del self._servers[i]
                    return at
            return None
        self._count += 1
        return self._program[self._count - 1] if self._count <= len(self._program) else None


def _ids(recorded: list[Event], given: int = 0) -> list[str]:
    """Every id the program made, in the order the log first shows it; the ids in the first
    ``given`` events (given to the replay, not made by it) are left out."""
    ids = [recorded[0].stream]
    for event in recorded:
        body = event.body
        found: list[str | None] = []
        if isinstance(body, SessionStarted):
            found = [body.root_conversation_id]
        elif isinstance(body, ConversationOpened):
            found = [event.conversation_id]
        elif isinstance(body, TaskEnqueued) and not _submitted(body):
            found = [body.plan.task_id]  # a submitted task's id came with it, from outside
        ids += [i for i in found if i is not None and i not in ids]
    if given:  # a fork's copied events were not made by the program: nor were their ids
        copied = set(_ids(recorded[:given]))
        ids = [i for i in ids if i not in copied]
    return ids


class _Program(msgspec.Struct, frozen=True):
    """How the live program was configured (not recorded in the log)."""

    max_interrupt_chain_depth: int
    mcp_limits: McpLimits | None
    workdir: str
    history: HistorySettings = HistorySettings()


class _Driver:
    def __init__(self, recorded: list[Event], timeout: float, program: _Program) -> None:
        from plait.runtime import Runtime

        self.recorded = recorded
        self.session_id = recorded[0].stream
        self.timeout = timeout
        started = recorded[0].body
        assert isinstance(started, SessionStarted)
        self.given = started.forked_from.at_seq if started.forked_from is not None else 2
        ids = iter(_ids(recorded, self.given))
        servers = {  # configured (as recorded), or heard of
            *(started.settings.mcp_servers if started.settings else ()),
            *(
                e.body.server
                for e in recorded
                if isinstance(e.body, McpServerReady | McpServerFailed | McpToolsRefreshed)
            ),
        }
        self.model = ReplayModel()
        self.approvals = ReplayApprovals()
        self.servers: ReplayServers | None = None

        def make_servers(configs: Any, report: Any) -> ReplayServers:
            self.servers = ReplayServers(configs, report)
            return self.servers

        self.forced = _forced_closes(recorded)
        closing = {e.seq for group in self.forced.values() for e in group}
        self.crash_points = set(_crash_points(recorded, closing))
        self.store = _RecordedTime(recorded, sorted(self.crash_points | set(self.forced)))
        self.runtime = Runtime(
            self.store,
            model=ModelSettings(model=started.model or "replay", api_key="replay"),
            workdir=program.workdir,
            max_interrupt_chain_depth=program.max_interrupt_chain_depth,
            mcp_limits=program.mcp_limits,
            history=program.history,
            new_id=lambda: next(ids, None) or str(uuid.uuid4()),
            mcp_servers={name: McpServerConfig(command="replay") for name in sorted(servers)},
            model_client=self.model,
            mcp_factory=make_servers,
            approval_gate=self.approvals,
            expire_every_sec=None,
        )
        self.open_calls: dict[str, str] = {}  # call id -> tool, requested and not answered
        self.started: set[str] = set()  # MCP calls sent and not answered
        self.asked: set[str] = set()  # calls waiting for their approval
        self.tail: Subscription | None = None
        self.held: deque[Event] = deque()  # produced before a submission that came in first

    def run(self) -> ReplayResult:
        try:
            return self._run()
        finally:
            if self.tail is not None:
                self.tail.close()
            self.runtime.close(timeout=2.0)

    def _run(self) -> ReplayResult:
        root = self.recorded[1]
        if not isinstance(root.body, ConversationOpened):
            raise ReplayError(f"session {self.session_id} seq 2 is not the root conversation")
        # The session's start (its recorded configuration, its root) is given, as is all a
        # fork copied: the replay resumes from there, and the program runs the rest.
        copied = [
            NewEvent(e.body, e.conversation_id, e.task_id, at=e.at)
            for e in self.recorded[: self.given]
        ]
        self.runtime.store.append(self.session_id, copied, 0)
        self.handle = self.runtime.resume(self.session_id)
        produced = self.runtime.store.read(self.session_id)
        self.tail = self.runtime.store.subscribe(produced[-1].position)
        done = self.given
        for expected in self.recorded[self.given :]:
            self._feed_in(expected)
            if _lifecycle(expected.body):
                done += 1  # fed in; where it lands among the program's events is a race
                continue
            body = expected.body
            submitted = isinstance(body, TaskEnqueued) and _submitted(body)
            divergence = _compare(
                expected, self._submission(expected) if submitted else self._next()
            )
            if divergence is not None:
                return ReplayResult(self.session_id, done, len(self.recorded), divergence)
            self._track(expected)
            done += 1
        return ReplayResult(self.session_id, done, len(self.recorded))

    def _next(self) -> Event | None:
        """The program's next event (servers' events are passed over: see ``LIFECYCLE``)."""
        if self.held:
            return self.held.popleft()
        assert self.tail is not None
        while (event := self.tail.get(timeout=self.timeout)) is not None:
            if not _lifecycle(event.body):
                return event
        return None

    def _submission(self, expected: Event) -> Event | None:
        """The program's record of a task submitted from outside.

        Where a submission lands among the program's events is a race, like a server's
        report: the program may have recorded what it did next before the task came in. Those
        events are held, to be compared next, in their order.
        """
        for held in self.held:
            if isinstance(held.body, TaskEnqueued) and held.task_id == expected.task_id:
                self.held.remove(held)
                return held
        assert self.tail is not None
        while (event := self.tail.get(timeout=self.timeout)) is not None:
            if isinstance(event.body, TaskEnqueued) and event.task_id == expected.task_id:
                return event
            if not _lifecycle(event.body):
                self.held.append(event)
        return None

    def _track(self, event: Event) -> None:
        body = event.body
        if isinstance(body, ToolCallRequested):
            self.open_calls[body.call_id] = body.tool
        elif isinstance(body, ToolCallStarted):
            self.started.add(body.call_id)
        elif isinstance(body, ToolCallCompleted):
            self.open_calls.pop(body.call_id, None)
            self.started.discard(body.call_id)
        elif isinstance(body, ToolApprovalRequested):
            self.asked.add(body.call_id)
        elif isinstance(body, ToolApprovalDecided):
            self.asked.discard(body.call_id)

    # --- what came from outside ----------------------------------------------------------------

    def _feed_in(self, event: Event) -> None:
        """If ``event`` came from outside the program, make it happen as it did."""
        body, wait = event.body, self.timeout
        if event.seq in self.crash_points:  # first: its answers look like results otherwise
            self._crash_and_resume()
        elif event.seq in self.forced:
            self._force_close(self.forced[event.seq])
        elif isinstance(body, TaskEnqueued) and _submitted(body):
            self.handle._scheduler.tell(Enqueue((body.plan,)))
        elif isinstance(body, ModelResponded):
            reply = ModelReply(
                _text(body.text) or "",
                list(body.tool_calls),
                body.finish_reason,
                body.usage,
                _text(body.reasoning) or "",
            )
            self.model.answer(reply, wait)
        elif isinstance(body, ModelRequestFailed):
            failed = AttemptFailed(body.attempt, body.error, body.status, body.retry_in_sec)
            self.model.attempt_failed(failed, wait)
        elif isinstance(body, TurnAborted) and body.reason == "failed":
            # Else the program failed by itself.
            self.model.fail(body.detail, min(wait, 0.5), body.model_error)
        elif isinstance(body, ToolCallCompleted) and self._is_mcp(body.call_id):
            assert self.servers is not None
            images = [_image(i) for i in body.images]
            outcome: Outcome = "timeout" if body.outcome == "timeout" else "error"
            if body.outcome == "ok":
                outcome = "ok"
            output = _text(body.output) or ""
            result = CallResult(output, outcome, images, body.duration_ms, body.control)
            self.servers.answer(body.call_id, result, wait)
        elif isinstance(body, ToolApprovalDecided) and body.call_id in self.asked:
            self.approvals.answer(body, wait)  # decided outside the program, as it was
        elif isinstance(body, McpServerReady | McpServerFailed | McpToolsRefreshed):
            if self.servers is not None:
                self.servers.inject(body)
        elif self._by_user(event):
            self.handle.interrupt()
        elif self._destroyed_from_outside(event):
            self.handle.destroy(event.conversation_id or "")
        elif isinstance(body, SessionClosed):
            self.handle._journal.record_last([body])

    def _force_close(self, group: list[Event]) -> None:
        """Stop the program where the close found it stuck, and record what the close did."""
        self._stop_here()
        self.handle._journal.record_last(
            [NewEvent(e.body, e.conversation_id, e.task_id) for e in group]
        )

    def _crash_and_resume(self) -> None:
        """Stop the replayed session as the process stopped, and resume it as it was resumed."""
        self._stop_here()
        self.handle = self.runtime.resume(self.session_id)

    def _stop_here(self) -> None:
        """Stop the replayed session where the recorded one stopped; what it records next is
        what the log recorded there."""
        self.handle._stop(timeout=2.0)
        self.model.abandon()
        self.store.release()

    def _is_mcp(self, call_id: str) -> bool:
        """Whether the call went to an MCP server (only those wait for a recorded result)."""
        return call_id in self.started

    def _by_user(self, event: Event) -> bool:
        """The first event of a user interrupt (what it drops, or the abort)."""
        body = event.body
        previous = self.recorded[event.seq - 2].body if event.seq > 1 else None
        starts = (isinstance(body, TaskDropped) and body.reason == BY_USER) or (
            isinstance(body, TurnAborted) and body.detail == BY_USER
        )
        if isinstance(body, ToolCallCompleted) and body.output == "aborted: interrupted":
            starts = True
        follows = isinstance(previous, TaskDropped) and previous.reason == BY_USER
        return starts and not follows

    def _destroyed_from_outside(self, event: Event) -> bool:
        """A destroy by the embedder (not by a ``conv_destroy`` call being answered)."""
        body = event.body
        destroying = (isinstance(body, TaskDropped) and body.reason == DESTROYED) or isinstance(
            body, ConversationDestroyed
        )
        if isinstance(body, TurnAborted) and body.detail == DESTROYED:
            destroying = True
        by_tool = "conv_destroy" in self.open_calls.values()
        previous = self.recorded[event.seq - 2]
        follows = previous.conversation_id == event.conversation_id and (
            (isinstance(previous.body, TaskDropped) and previous.body.reason == DESTROYED)
            or (isinstance(previous.body, TurnAborted) and previous.body.detail == DESTROYED)
        )
        return destroying and not by_tool and not follows


def _submitted(body: TaskEnqueued) -> bool:
    """Whether the task was submitted from outside (the program queues the others first)."""
    return not body.front and body.plan.closure is None


def _text(content: Any) -> str | None:
    return content if isinstance(content, str) or content is None else None


def _image(image: InputImage) -> tuple[str, str]:
    url = _text(image.image_url) or ""
    head, _, data = url.partition(",")
    return head.removeprefix("data:").removesuffix(";base64"), data


def _compare(expected: Event, got: Event | None) -> Divergence | None:
    if got is None:
        return Divergence(
            expected.stream, expected.seq, expected.conversation_id, _line(expected), "nothing"
        )
    fields: dict[str, list[Any]] = {}
    for name in ("conversation_id", "task_id"):
        if getattr(expected, name) != getattr(got, name):
            fields[name] = [getattr(expected, name), getattr(got, name)]
    if type(expected.body) is type(got.body):
        fields |= _differences(expected.body, got.body)
    else:
        fields["type"] = [type(expected.body).__name__, type(got.body).__name__]
    if not fields:
        return None
    return Divergence(
        expected.stream, expected.seq, expected.conversation_id, _line(expected), _line(got), fields
    )


def _differences(expected: Body, got: Body) -> dict[str, list[Any]]:
    mine, theirs = msgspec.to_builtins(expected), msgspec.to_builtins(got)
    return {
        name: [mine.get(name), theirs.get(name)]
        for name in itertools.chain(mine, (k for k in theirs if k not in mine))
        if name not in IGNORED_FIELDS and mine.get(name) != theirs.get(name)
    }


def _line(event: Event) -> str:
    text = msgspec.json.encode(event.body).decode()
    return f"{type(event.body).__name__} {text[:200]}"
