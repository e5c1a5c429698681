"""The replay driver: the same actors run again, answered from the log, each event compared.

The driver walks the recorded events in order. What came from outside the program (see
``inference``) it feeds in when its turn comes: a task the user submitted, a user interrupt or
destroy, a stop on purpose, the close, the MCP servers a run had and their lifecycle, a model
reply or failure, an MCP tool result, an approval decided outside it (by the approver, for want
of one, by its timeout). Model and tool calls and approvals wait for it (``ReplayModel``,
``ReplayServers``, ``ReplayApprovals``; the approver is never called). Everything else the
program must produce by itself, and each produced event is compared with the recorded one at
the same seq.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import msgspec

from plait._errors import ReplayError
from plait.actors import (
    AttemptFailed,
    Enqueue,
    Interrupt,
    McpLimits,
    ModelReply,
    ModelSettings,
    Recipient,
    Stop,
)
from plait.actors.mcp import FUNCTIONS, CallResult, McpServerConfig, Outcome, Report
from plait.events import (
    Body,
    ConversationOpened,
    Event,
    HistorySettings,
    InputImage,
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolSnapshot,
    McpToolsRefreshed,
    McpToolWithheld,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    NewEvent,
    SessionClosed,
    SessionReopened,
    SessionStarted,
    StopRequested,
    Subscription,
    TaskCompleted,
    TaskEnqueued,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
)
from plait.replay._compare import ReplayResult, compare
from plait.replay._effects import (
    ReplayApprovals,
    ReplayIds,
    ReplayInstructions,
    ReplayModel,
    ReplayServers,
)
from plait.replay._inference import (
    NOT_THE_PROGRAMS,
    crash_points,
    forced_closes,
    interrupt_cause,
    is_lifecycle,
    made_ids,
    outside_destroy,
    program_seq,
    read_instructions,
    recorded_only,
    submitted,
    submitted_task,
)
from plait.replay._recorded_store import RecordedStore
from plait.runtime import Outside, Runtime, RuntimeSettings

__all__ = ["Driver", "Program"]


class Program(msgspec.Struct, frozen=True):
    """How the live program was configured (not recorded in the log)."""

    max_interrupt_chain_depth: int
    mcp_limits: McpLimits | None
    history: HistorySettings = HistorySettings()
    functions: list[McpToolSnapshot] | None = None
    """The program's function tools, offered in place of those recorded (``None``: as
    recorded)."""


class Driver:
    def __init__(self, recorded: list[Event], timeout: float, program: Program) -> None:
        self.recorded = recorded
        self.session_id = recorded[0].stream
        self.timeout = timeout
        self.program = program
        started = recorded[0].body
        assert isinstance(started, SessionStarted)
        self.given = started.forked_from.at_seq if started.forked_from is not None else 2
        servers = {  # configured (as recorded), offered by a run, or heard of
            *(started.settings.mcp_servers if started.settings else ()),
            *(s for e in recorded if isinstance(e.body, McpServersOffered) for s in e.body.servers),
            *(
                e.body.server
                for e in recorded
                if isinstance(e.body, McpServerReady | McpServerFailed | McpToolsRefreshed)
            ),
        }
        self.model = ReplayModel()
        self.read = ReplayInstructions(read_instructions(recorded))
        self.approvals = ReplayApprovals()
        self.servers: ReplayServers | None = None

        def make_servers(configs: Mapping[str, McpServerConfig], report: Report) -> ReplayServers:
            self.servers = ReplayServers(configs, report)
            return self.servers

        forced = forced_closes(recorded)
        closing = {e.seq for group in forced.values() for e in group}
        # What a fork copied is given, crashes and closes in it too: the program starts after.
        self.forced = {seq: group for seq, group in forced.items() if seq > self.given}
        # A run whose servers changed records them first: the process stopped before that.
        points = {_before_offer(recorded, c) for c in crash_points(recorded, closing)}
        self.crash_points = {seq for seq in points if seq > self.given}
        halts = {program_seq(recorded, self.given, s) for s in self.crash_points | set(self.forced)}
        racing = {  # fed in: where each lands among the program's events is a race
            program_seq(recorded, self.given, e.seq): e.body
            for e in recorded[self.given :]
            if is_lifecycle(e.body) or submitted_task(e.body) is not None
        }
        reports = _reports(recorded, self.given, {*self.crash_points, *self.forced})
        self.store = RecordedStore(recorded, sorted(halts), racing, reports, timeout)
        settings = RuntimeSettings(
            model=ModelSettings(model=started.model or "replay", api_key="replay"),
            max_interrupt_chain_depth=program.max_interrupt_chain_depth,
            mcp_limits=program.mcp_limits or McpLimits(),
            history=program.history,
            mcp_servers={name: McpServerConfig(command="replay") for name in sorted(servers)},
            expire_every_sec=None,
        )
        self.runtime = Runtime(
            self.store,
            settings,
            _outside=Outside(
                self.model,
                make_servers,
                self.approvals,
                ReplayIds(made_ids(recorded)),
                self.read,
                records_servers=False,  # each run's are fed in, as recorded
            ),
        )
        self.open_calls: dict[str, str] = {}  # call id -> tool, requested and not answered
        self.started: set[str] = set()  # MCP calls sent and not answered
        self.asked: set[str] = set()  # calls waiting for their approval
        self.requests = 0  # model requests the program made, as the log numbers them
        self.tail: Subscription | None = None
        self.held: deque[Event] = deque()  # produced before a submission that came in first
        # A stop on purpose (docs/replay.md#stops): the task it found running, until its end
        # is recorded; then the task whose end was the stopped process's last record.
        self.stopping: str | None = None
        self.handed_back: str | None = None

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
        self.host = self.runtime.sessions.hosts[self.session_id]
        produced = self.runtime.store.read(self.session_id)
        self.tail = self.runtime.store.subscribe(produced[-1].position)
        done = self.given
        for expected in self.recorded[self.given :]:
            if isinstance(expected.body, NOT_THE_PROGRAMS):
                done += 1  # the key's or a request's, not the program's: given
                continue
            self._feed_in(expected)
            if is_lifecycle(expected.body):
                done += 1  # fed in; where it lands among the program's events is a race
                continue
            body = expected.body
            outside = isinstance(body, TaskEnqueued) and submitted(body)
            divergence = compare(expected, self._submission(expected) if outside else self._next())
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
            if not is_lifecycle(event.body):
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
            if not is_lifecycle(event.body):
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
        elif isinstance(body, ModelRequested):
            self.requests += 1
        if self.stopping is not None and event.task_id == self.stopping and _ends_task(body):
            # The stopped task ended, as the live run resolved the stop (by itself within the
            # grace, at a checkpoint, or cut): the process handed the session back there.
            self.stopping, self.handed_back = None, event.task_id

    # --- what came from outside ----------------------------------------------------------------

    def _feed_in(self, event: Event) -> None:
        """If ``event`` came from outside the program, make it happen as it did."""
        self.store.fed(event.seq - 1)  # what came before is in: a program held for it goes on
        body, wait = event.body, self.timeout
        crash = event.seq in self.crash_points
        offered = body if isinstance(body, McpServersOffered) else None
        if crash:
            self.stopping = None  # the stopping process was killed: the next one ends its task
        ends = crash or (self.handed_back is not None and event.task_id != self.handed_back)
        if ends:  # a process ends here: a report after its last event is the next one's
            self.store.fed(event.seq)  # (docs/replay.md#what-replay-feeds-in)
        if self.handed_back is not None and ends:
            self.handed_back = None  # what follows a stop's records is the next process's
            if not crash:  # (docs/processes.md#stopping)
                self._crash_and_resume(offered, at_halt=False)
                if offered is not None:
                    return  # the next process's servers: given to it as it resumed
        if crash:  # first: its answers look like results otherwise
            self._crash_and_resume(offered)
        elif event.seq in self.forced:
            self._force_close(self.forced[event.seq])
        elif isinstance(body, TaskEnqueued) and submitted(body):
            self._actor().tell(Enqueue((body.plan,)))
        elif isinstance(body, ModelResponded):
            reply = ModelReply(
                _text(body.text) or "",
                list(body.tool_calls),
                body.finish_reason,
                body.usage,
                _text(body.reasoning) or "",
                body.cut_by,  # type: ignore[arg-type]  # as recorded
                body.response_id,
                body.response_model,
                list(body.reasoning_items),
            )
            self.model.answer(self.requests - 1, reply, wait)
        elif isinstance(body, ModelRequestFailed):
            failed = AttemptFailed(body.attempt, body.error, body.status, body.retry_in_sec)
            self.model.attempt_failed(self.requests - 1, failed, wait)
        elif isinstance(body, StopRequested):  # the task ends at its next checkpoint, as it did
            self._actor().tell(Stop(body.detail, at_checkpoint=True))
            self.stopping = event.task_id
        elif isinstance(body, TurnAborted) and body.cause == "shutdown":
            self._actor().tell(Stop(body.detail))  # nothing starts after it, here
            self.stopping = event.task_id
        elif isinstance(body, TurnAborted) and body.cause == "model":
            self.model.fail(self.requests - 1, body.detail, wait, body.model_error)
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
        elif isinstance(body, McpServersOffered) and self.servers is not None:
            self.servers.inject(body)  # the servers the run that follows had
        elif isinstance(body, McpServerReady | McpServerFailed | McpToolsRefreshed):
            functions = self.program.functions
            if (
                isinstance(body, McpServerReady)
                and body.server == FUNCTIONS
                and functions is not None
            ):
                body = msgspec.structs.replace(body, tools=functions)  # as the program has them
            if self.servers is not None:
                self.servers.inject(body)
            self.store.fed(event.seq)
        elif (cause := interrupt_cause(event, self._previous(event))) is not None:
            self._actor().tell(Interrupt(cause))
        elif outside_destroy(event, self._before(event), self._destroy_open()):
            self.handle.destroy(event.conversation_id or "")
        elif isinstance(body, SessionClosed | SessionReopened):  # the embedder's, as recorded
            self.host.journal.record_last([body])

    def _force_close(self, group: list[Event]) -> None:
        """Stop the program where the close found it stuck, and record what the close did."""
        self._stop_here(True)
        self.host.journal.record_last(
            [NewEvent(e.body, e.conversation_id, e.task_id) for e in group]
        )

    def _crash_and_resume(
        self, offered: McpServersOffered | None = None, *, at_halt: bool = True
    ) -> None:
        """Stop the replayed session as the process stopped, and resume it as it was resumed
        (with the servers it ``offered``, if the new process recorded them first); not
        ``at_halt``: it handed the session back, before any crash point."""
        self._stop_here(at_halt)
        if offered is not None:  # in the log before the resumed program starts, as recorded
            self.store.append(self.session_id, [offered], self.store.last_seq(self.session_id))
        # What was sent before the crash gets no answer from outside: the resumed program
        # records its end itself, or starts it again (a ToolCallStarted of its own).
        self.started.clear()
        self.handle = self.runtime.resume(self.session_id)
        self.host = self.runtime.sessions.hosts[self.session_id]

    def _stop_here(self, at_halt: bool) -> None:
        """Stop the replayed session where the recorded one stopped (``at_halt``: at the crash
        point or forced close it is halted at); what it records next is what the log recorded
        there."""
        self.read.abandon()  # a read stuck as the recorded one was gives up, as the actors stop
        self.host.crash(timeout=2.0)
        self.model.abandon(self.requests)
        self.store.release(at_halt=at_halt)

    def _actor(self) -> Recipient:
        """The replayed session's actor (it runs while the log is fed in)."""
        assert self.host.actor is not None
        return self.host.actor

    def _is_mcp(self, call_id: str) -> bool:
        """Whether the call went to an MCP server (only those wait for a recorded result)."""
        return call_id in self.started

    def _previous(self, event: Event) -> Event | None:
        """The event the program recorded before ``event`` (a signed head is not its)."""
        seq = event.seq - 1
        while seq > 1 and isinstance(self.recorded[seq - 1].body, NOT_THE_PROGRAMS):
            seq -= 1
        return self.recorded[seq - 1] if seq >= 1 else None

    def _before(self, event: Event) -> Event:
        previous = self._previous(event)
        assert previous is not None  # a destroy follows the session's start
        return previous

    def _destroy_open(self) -> bool:
        """Whether a ``conv_destroy`` call is open (its destroy is the program's own)."""
        return "conv_destroy" in self.open_calls.values()


def _ends_task(body: Body) -> bool:
    """Whether ``body`` is a task's end (completed, or aborted for good: not replaced)."""
    return isinstance(body, TaskCompleted) or (
        isinstance(body, TurnAborted) and body.reason != "replaced"
    )


def _reports(recorded: list[Event], given: int, breaks: set[int]) -> dict[int, int]:
    """The servers' reports the program must have before it goes on: after its n-th event (as
    the replay's store counts them), the recorded seq of the last report the log recorded
    right after it, where nothing but reports comes between and no process ends or begins.

    A report reaches the pool when the driver feeds it in, which it does as it walks the log,
    behind the program; the program must not ask for its tools meanwhile, or it would offer
    those of before the report where the recorded run offered those of after it."""
    found: dict[int, int] = {}
    count, previous = 0, None
    for event in recorded:
        body = event.body
        if isinstance(body, McpServerReady | McpServerFailed | McpToolsRefreshed):
            if previous is not None and previous > given and not {previous, event.seq} & breaks:
                found[count] = event.seq
            continue
        if recorded_only(body):  # a run's servers, or a key's or a request's record, break it
            if not isinstance(body, McpToolWithheld):  # (the pool's own record of a report)
                previous = None
            continue
        count += 1
        previous = None if submitted_task(body) is not None else event.seq  # (a race itself)
    return found


def _before_offer(recorded: list[Event], seq: int) -> int:
    """Where the process that resumed at ``seq`` began to record: at the servers it offered,
    if it recorded them first (docs/replay.md#mcp-servers-per-run)."""
    before = recorded[seq - 2] if seq > 1 else None
    return seq - 1 if before is not None and isinstance(before.body, McpServersOffered) else seq


def _text(content: object) -> str | None:
    return content if isinstance(content, str) or content is None else None


def _image(image: InputImage) -> tuple[str, str]:
    url = _text(image.image_url) or ""
    head, _, data = url.partition(",")
    return head.removeprefix("data:").removesuffix(";base64"), data
