"""``Conversation``: the actor that runs one conversation's tasks, turn by turn.

A task runs as turns: build the prompt from the base instructions and the history, record
``TurnStarted`` and ``ModelRequested``, stream the model on the effect loop, record its reply,
run its tool calls, and loop until the model answers without tool calls (docs/conversations.md).
This module holds the actor's state and that loop; the rest of a turn lives beside it:
``model_call`` sends the request off this thread, given the turn's data; as functions of the
actor, ``model_reply`` goes on from a reply, ``tool_batch`` runs the reply's tool calls with
``call_approvals`` (the calls that wait for a decision), ``compaction`` keeps the history
within bounds with ``token_count``, and ``interrupts`` ends a task early. Those functions
change the running task's ``TaskRun``: the turn is the owner they lack (docs/code.md#no-circles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import cast

import msgspec

from plait.actors import builtins, compaction, interrupts, model_reply, targets, tool_batch
from plait.actors.actor import Actor
from plait.actors.approvals import ConversationApprovals
from plait.actors.compaction import COMPACT_INSTRUCTIONS
from plait.actors.deps import ConversationDeps
from plait.actors.mcp.names import canonical_sha256
from plait.actors.messages import (
    Abort,
    ApprovalFinished,
    AttemptFailedNotice,
    AwaitServers,
    ModelFinished,
    RunTask,
    ServersSettled,
    TaskEnded,
    ToolFinished,
    ToolView,
    ViewFor,
    frozen_names,
)
from plait.actors.model_call import HeldDeltas, call_model
from plait.actors.prompt import PromptView, approx_tokens, empty_content, encoded
from plait.actors.seams import (
    Askable,
    McpPoolRef,
)
from plait.actors.stream import ModelReply
from plait.actors.token_count import TokenCount
from plait.actors.tool_batch import ToolBatch
from plait.events.projections.approvals import ApprovalState
from plait.events.projections.contexts import CONTEXTS
from plait.events.projections.history import ChatMessage, Histories, HistoryProjection
from plait.events.projections.messages import ContentShape
from plait.events.types import (
    Body,
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelRequested,
    ModelRequestFailed,
    NewEvent,
    TaskCompleted,
    TurnStarted,
)
from plait.events.values import (
    ContextChange,
    TaskPlan,
    as_text,
)

__all__ = ["COMPACT_INSTRUCTIONS", "DEFAULT_INSTRUCTIONS", "Conversation"]

DEFAULT_INSTRUCTIONS = (
    "You are a capable assistant working in a session of several conversations. "
    "Answer directly when you can; use the tools you are given when they help."
)
"""Base instructions of a conversation that names none (the built-in default)."""

SEND_FIRST_SEC = 0.002
"""How long a turn waits for its request to be written before it writes the request's record."""

_BUILTIN_TOOLS = builtins.builtin_specs()
_BUILTIN_TOOLS_SHA = canonical_sha256(_BUILTIN_TOOLS)
_PLAN_TOOL = builtins.plan_spec()


class TaskRun(msgspec.Struct):
    """The task a conversation is running, and where its current turn is."""

    plan: TaskPlan
    """The task."""
    turn: int = 0
    """The current turn, counted from 1."""
    token: int = 0
    """The current turn's token: a message that carries another one is stale and dropped."""
    model_future: Future[ModelReply] | None = None
    """The model request out, if one is: its future (an abort cancels it)."""
    batch: ToolBatch | None = None
    """The tool calls of the turn's reply, while they run."""
    tool_view: ToolView = ToolView()
    """The MCP tools this turn offers."""
    waited: bool = False
    """Whether this task already waited for MCP servers still starting."""
    compacting: HistoryCompacted | None = None
    """A compaction request is out: the event its summary completes."""
    compacted: bool = False
    """The history was compacted for the coming turn (so it is not compacted twice)."""
    control: ContextChange | None = None
    """A context change a tool result of this turn asked for, applied before the next."""
    stop: str | None = None
    """A stop was asked (``StopRequested``, its detail): the task ends at its next checkpoint
    (docs/interrupts.md#stopping-at-a-checkpoint)."""


class Conversation(Actor):
    """One conversation of a session; the session starts one actor per conversation.

    Other actors speak to it in messages only; its public methods are for the modules that
    run parts of its turns (``model_reply``, ``tool_batch``, ``compaction``, ``interrupts``...).
    """

    def __init__(
        self,
        conversation_id: str,
        deps: ConversationDeps,
        session: Askable,
        past: list[Event],
        approvals: ApprovalState | None = None,
    ) -> None:
        """``past``: the session's events (or only its opening, with the session's
        ``approvals`` so far, for a conversation opened mid-session)."""
        super().__init__()
        self.id = conversation_id
        self.deps = deps
        self.journal = deps.journal
        self.session = session
        self.projection = HistoryProjection()
        self.histories: Histories = self.projection.initial()
        self.contexts = CONTEXTS.initial()  # of this conversation's events: its own alone
        self.run: TaskRun | None = None
        self.prompt_view = PromptView(
            strict=deps.model_protocol >= 1,
            reasoning=deps.model_options.send_reasoning,
            empty=empty_content(deps.model_protocol),
        )
        """The history, encoded as the model is shown it."""
        self.approvals = ConversationApprovals(conversation_id, approvals)
        self._tokens_issued = 0
        """Turn tokens handed out so far (each turn of this actor gets its own)."""
        self.token_count = TokenCount()
        """What the model last counted of the history."""
        self._offered_key: tuple[bool, bool, str] | None = None
        """What the offered tools were last made for: (conversation tools on, plan tool on,
        the MCP view's hash)."""
        self._offered: tuple[Sequence[Mapping[str, object]] | msgspec.Raw, str] = ([], "")
        """The offered tools then made, encoded, and their hash."""
        self._apply(past)

    # --- state -------------------------------------------------------------------------------

    @property
    def context(self) -> ConversationOpened:
        """This conversation's context now: as it opened, each change applied."""
        return self.contexts.by_conversation.get(self.id) or ConversationOpened()

    @property
    def pool(self) -> McpPoolRef:
        """The session's MCP pool, for a reply's MCP calls: there are none without one."""
        assert self.deps.pool is not None, "an MCP call in a session with no MCP servers"
        return self.deps.pool

    def _apply(self, events: list[Event] | tuple[Event, ...]) -> None:
        for event in events:
            self.approvals.apply(event)  # keys and policies are the session's
            if event.conversation_id != self.id:
                continue
            self.projection.apply(self.histories, event)
            CONTEXTS.apply(self.contexts, event)
            self.token_count.apply(event.body)

    def record(self, *bodies: Body, task: str | None = None, ahead: bool = False) -> list[Event]:
        """Record ``bodies`` as one group, for ``task`` (by default the running task);
        ``ahead``: made, to be written by ``journal.flush`` (docs/event-log.md#writing-ahead)."""
        task_id = task if task is not None else (self.run.plan.task_id if self.run else None)
        return self.record_events([NewEvent(body, self.id, task_id) for body in bodies], ahead)

    def record_events(self, items: list[NewEvent], ahead: bool = False) -> list[Event]:
        """Record ``items`` as one group (a crash keeps all or none) and apply them."""
        journal = self.journal
        events: list[Event] = journal.record(items, origin=self.actor_ref, ahead=ahead)
        self._apply(events)
        if events:
            self.approvals.now = events[-1].at
        return events

    def history(self) -> list[ChatMessage]:
        """This conversation's history, as the model is shown it."""
        conv = self.histories.conversations.get(self.id)
        return conv.messages if conv else []

    def synced(self) -> list[ChatMessage]:
        """The history, with the prompt view brought up to date with it."""
        history = self.history()
        self.prompt_view.sync(history)
        return history

    def prompt_tokens(self) -> int:
        """The history's tokens (the prompt view is in sync): the model's count for what it
        was last sent, approximated for what came after (docs/compaction.md#when-it-runs)."""
        return self.token_count.of(self.prompt_view)

    def sent_tokens(self) -> int:
        """The estimated prompt tokens of the request out (the history has not changed since
        it went)."""
        assert self.run is not None
        pending = self.run.compacting
        if pending is not None:
            summarised = self.prompt_view.tokens(0, pending.kept_from)
            return summarised + approx_tokens(len(COMPACT_INSTRUCTIONS))
        return self.prompt_tokens() + approx_tokens(len(self.instructions()))

    # --- messages ----------------------------------------------------------------------------

    def role(self, message: object) -> str:
        return f"conversation {self.id}"

    def on_receive(self, message: object) -> object:
        try:
            return super().on_receive(message)  # what raises stops the session
        finally:
            # What the handling made ahead (a task's start, built-in calls and their answers)
            # is durable before the next message (docs/event-log.md#writing-ahead).
            self.journal.flush()

    def receive(self, message: object) -> object:
        if recorded := self.journal.listeners.recorded(self.actor_ref):
            self._apply(recorded)
        match message:
            case RunTask(plan=plan):
                narrowed = self.approvals.narrowed(plan.context)
                if narrowed is not None:
                    self.record(narrowed, task=plan.task_id)
                self._start(plan)
            case ModelFinished():
                model_reply.on_finished(self, message)
            case ToolFinished():
                tool_batch.on_finished(self, message)
            case ApprovalFinished():
                tool_batch.on_decision(self, message)
            case ServersSettled(token=token):
                run = self.run
                if run is not None and run.token == token and run.model_future is None:
                    self._prompt()
            case AttemptFailedNotice():
                if self.run and message.token == self.run.token:
                    self.record(
                        ModelRequestFailed(
                            message.attempt, message.error, message.status, message.retry_in_sec
                        )
                    )
            case Abort(task_id=task_id, detail=detail, at_checkpoint=True):
                if self.run and self.run.plan.task_id == task_id:
                    interrupts.stop_at_checkpoint(self, detail)
            case Abort(task_id=task_id, reason=reason, cause=cause, detail=detail, destroy=destroy):
                if self.run and self.run.plan.task_id == task_id:
                    extra = [ConversationDestroyed(detail)] if destroy else []
                    interrupts.abort(self, reason, cause, detail, *extra)
                elif destroy:
                    self.record(ConversationDestroyed(detail), task=None)
                if destroy:
                    self.actor_ref.stop(block=False)
        return None

    # --- the turn loop -----------------------------------------------------------------------

    def _start(self, plan: TaskPlan) -> None:
        self.run = TaskRun(plan)  # a continuation's answer came with its TaskStarted
        change = plan.context
        if change is None:
            self.next_turn()
        elif self.change_context(change, TaskCompleted()):
            self.end()

    def change_context(self, change: ContextChange, *after: Body) -> bool:
        """Record ``change`` (its allowlist checked first); False when it was refused, which
        ends the task."""
        if "mcp_allowlist" in change.changed and change.mcp_allowlist:
            checked = targets.check_allowlist(self.deps.pool, change.mcp_allowlist, self.record)
            if isinstance(checked, str):
                interrupts.abort(self, "failed", "error", f"context change refused: {checked}")
                return False
            change = msgspec.structs.replace(change, mcp_allowlist=checked)
        self.record(ConversationContextChanged(**msgspec.structs.asdict(change)), *after)
        return True

    def next_turn(self) -> None:
        """Start the task's next turn."""
        assert self.run is not None
        run = self.run
        run.turn += 1
        self._tokens_issued += 1
        run.token = self._tokens_issued
        self._prompt()

    def _prompt(self) -> None:
        """Build the turn's prompt and send it, once the MCP servers it needs have started."""
        assert self.run is not None
        if interrupts.settle(self):
            return  # a stop was asked: no request starts
        run = self.run
        run.tool_view = ToolView()
        if self.deps.pool is not None:
            view = self.deps.pool.ask(ViewFor(frozen_names(self.context.mcp_allowlist)), timeout=30)
            run.tool_view = cast(ToolView, view)
            if run.tool_view.waiting and not run.waited:
                run.waited = True  # once per task: a late server is not waited for twice
                waiting = AwaitServers(run.tool_view.waiting, run.token, self.actor_ref)
                self.deps.pool.tell(waiting)
                return  # ServersSettled continues
        self.synced()
        compaction.trim(self)
        if compaction.start(self):
            return  # the compaction's reply continues the turn
        instructions = self.instructions()
        prompt_view = self.prompt_view
        shape = self.deps.model_client.content_shape or prompt_view.empty
        messages = prompt_view.messages(instructions, shape=shape)
        tools, tools_sha = self._offered_tools(run.tool_view)
        run.compacted = False
        # The request is built from the log alone, so it may go out while its record (and a
        # task's start, made ahead) is being made durable: the fsync overlaps the network. Its
        # reply comes back as a message, after this handler; its text deltas are held until
        # the record is in the feeds.
        deltas = self.request(messages, tools, shape)
        if deltas is None:
            return  # the session is being stopped
        # The request goes first: writing the record meanwhile would hold the interpreter
        # lock the effect loop needs to send it (a new connection may take longer: not waited).
        deltas.sent.wait(SEND_FIRST_SEC)
        self.record(
            TurnStarted(run.turn),
            ModelRequested(
                self.deps.model,
                tools_sha,
                canonical_sha256(instructions),
                prompt_view.sha256,
                len(prompt_view) + 1,
            ),
            ahead=True,
        )
        self.journal.flush()
        deltas.open()

    def request(
        self,
        messages: msgspec.Raw,
        tools: Sequence[Mapping[str, object]] | msgspec.Raw,
        shape: ContentShape,
    ) -> HeldDeltas | None:
        """Send the running turn's request (``model_call``); return its deltas, held until
        the request is recorded. ``None`` when the session is being stopped: nothing is sent."""
        run = self.run
        assert run is not None
        sent = call_model(
            self.deps,
            self.actor_ref,
            (self.id, run.plan.task_id, run.token),
            messages,
            tools,
            shape,
        )
        if sent is None:
            return None
        run.model_future, deltas = sent
        return deltas

    def instructions(self) -> str:
        """The system message of the task's turns: the conversation's base instructions (or
        the default), unless the task overrides them."""
        assert self.run is not None
        override = self.run.plan.base_instructions_override
        if override is not None:
            return as_text(override) or ""
        return as_text(self.context.base_instructions) or DEFAULT_INSTRUCTIONS

    def _offered_tools(
        self, tool_view: ToolView
    ) -> tuple[Sequence[Mapping[str, object]] | msgspec.Raw, str]:
        """The tools a turn offers the model (the conversation tools, the plan tool, then
        ``tool_view``'s MCP tools, docs/tools.md#what-a-conversation-is-offered), encoded, and
        their hash; made once per (switches, MCP view)."""
        prefs = self.context.tool_prefs
        key = (prefs.conversation_tools, prefs.include_plan_tool, tool_view.sha256)
        if self._offered_key != key:
            plan = [_PLAN_TOOL] if key[1] else []
            tools = [*(_BUILTIN_TOOLS if key[0] else ()), *plan, *tool_view.specs]
            sha = _BUILTIN_TOOLS_SHA if tools == _BUILTIN_TOOLS else canonical_sha256(tools)
            self._offered_key, self._offered = key, (encoded(tools) if tools else [], sha)
        return self._offered

    def end(self) -> None:
        """Forget the running task (its end is recorded); tell the scheduler it ended if a
        task waits to start (if none did, a task queued since starts as it is queued)."""
        assert self.run is not None
        task_id = self.run.plan.task_id
        self.run = None
        if self.journal.waiting:
            self.session.tell(TaskEnded(task_id))
