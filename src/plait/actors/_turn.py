"""``Turn``: a running task, turn by turn, as one state machine.

A task runs as turns: build the prompt from the base instructions and the history, record
``TurnStarted`` and ``ModelRequested``, stream the model on the effect loop, record its reply,
run its tool calls, and loop until the model answers without tool calls
(docs/conversations.md). The ``Turn`` owns all of it: its ``Phase`` moves only by the named
transitions of ``turn_states``, which docs/conversations.md#a-turns-states draws. Its parts
decide and shape without changing it: ``compaction`` (a summary in a turn of its own),
``model_reply`` (what a reply records), ``ToolBatch`` (the reply's calls, each in its
``CallState``), ``replacement`` (what ``conv_create``/``conv_send`` queue), ``model_call``
(the request, off the conversation's thread). An abort ends the task at the ``Checkpoint`` it
finds the turn in (docs/interrupts.md#checkpoints); a stop on purpose waits for the next one
(docs/interrupts.md#stopping-at-a-checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, cast

import msgspec

from plait._machines import moved
from plait.actors import _compaction as compaction
from plait.actors import _model_reply as model_reply
from plait.actors import _targets as targets
from plait.actors._messages import (
    ApprovalFinished,
    AttemptFailedNotice,
    AwaitServers,
    ModelFinished,
    ToolFinished,
    ToolResult,
    ToolView,
    ViewFor,
    frozen_names,
)
from plait.actors._model_call import call_model
from plait.actors._model_types import ResponsesInput
from plait.actors._prompt import approx_tokens
from plait.actors._replacement import replacement
from plait.actors._tool_batch import Advanced, CallParts, CallSite, ToolBatch
from plait.actors._turn_states import TRANSITIONS, Checkpoint, Phase
from plait.actors.mcp import canonical_sha256
from plait.events import (
    AbortCause,
    Body,
    ContextChange,
    ConversationContextChanged,
    Event,
    HistoryCompacted,
    ModelRequested,
    ModelRequestFailed,
    NewEvent,
    StopRequested,
    TaskCompleted,
    TaskPlan,
    TokensCounted,
    ToolCall,
    TurnAborted,
    TurnStarted,
    Usage,
    as_text,
)

if TYPE_CHECKING:
    from plait._errors import ModelErrorKind
    from plait.actors._approvals import ConversationApprovals
    from plait.actors._deps import ConversationDeps
    from plait.actors._model_call import HeldDeltas
    from plait.actors._prompt import PromptView
    from plait.actors._refs import Askable, Recipient
    from plait.actors._stream import ModelReply
    from plait.events import ConversationOpened
    from plait.events.projections import ChatMessage, ContentShape

__all__ = ["DEFAULT_INSTRUCTIONS", "SEND_FIRST_SEC", "Turn", "TurnHost"]

DEFAULT_INSTRUCTIONS = (
    "You are a capable assistant working in a session of several conversations. "
    "Answer directly when you can; use the tools you are given when they help."
)
"""Base instructions of a conversation that names none (the built-in default)."""

_NO_MESSAGES = msgspec.Raw(b"[]")
"""A request's chat messages on the Responses API, which sends input items instead."""

SEND_FIRST_SEC = 0.002
"""How long a turn waits for its request to be written before it writes the request's record."""

Tools: TypeAlias = Sequence[Mapping[str, object]] | msgspec.Raw
"""Tools as a request offers them, encoded or not."""


class TurnHost(CallParts, Protocol):
    """What a turn needs of its conversation (``Conversation``)."""

    @property
    def id(self) -> str: ...

    @property
    def me(self) -> Recipient:
        """The conversation's actor, which hears how what the turn sends out ends."""
        ...

    @property
    def context(self) -> ConversationOpened: ...

    @property
    def prompt_view(self) -> PromptView: ...

    def record(
        self, *bodies: Body, task: str | None = None, ahead: bool = False
    ) -> list[Event]: ...

    def record_events(self, items: list[NewEvent], ahead: bool = False) -> list[Event]: ...

    def history(self) -> list[ChatMessage]: ...

    def synced(self) -> list[ChatMessage]: ...

    def standing(self) -> tuple[ChatMessage | None, ChatMessage | None]:
        """The instructions and the summary the history opens with."""
        ...

    def prompt_tokens(self) -> int: ...

    def offered_tools(self, tool_view: ToolView) -> tuple[Tools, str]: ...

    def new_token(self) -> int:
        """A token no other turn of this conversation has."""
        ...

    def ended(self, task_id: str) -> None:
        """The task's end is recorded: the conversation forgets this turn."""
        ...


class Turn:
    """The running task of a conversation, and where its current turn is."""

    def __init__(self, host: TurnHost, plan: TaskPlan) -> None:
        self._host = host
        self.plan = plan
        """The task."""
        self.phase = Phase.PROMPTING
        """Where the turn is; only ``_move`` changes it."""
        self.number = 0
        """The current turn, counted from 1."""
        self.token = 0
        """The current turn's token: a message that carries another one is stale and dropped."""
        self.stop: str | None = None
        """A stop was asked (``StopRequested``, its detail): the task ends at its next
        checkpoint, whatever the phase."""
        self._model_future: Future[ModelReply] | None = None
        """The model request out, if one is (awaiting the model, or compacting)."""
        self._compacting: HistoryCompacted | None = None
        """While compacting: the event the summary completes."""
        self._compacted = False
        """The history was compacted for the coming turn (so it is not compacted twice)."""
        self._batch: ToolBatch | None = None
        """While running tools: the reply's calls."""
        self._tool_view = ToolView()
        """The MCP tools this turn offers."""
        self._waited = False
        """Whether this task already waited for MCP servers still starting (once per task)."""

    # --- what its parts need (BatchHost) -----------------------------------------------------

    @property
    def deps(self) -> ConversationDeps:
        return self._host.deps

    @property
    def session(self) -> Askable:
        return self._host.session

    @property
    def approvals(self) -> ConversationApprovals:
        return self._host.approvals

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    def record(self, *bodies: Body, ahead: bool = False) -> list[Event]:
        """Record ``bodies`` for the task, as one group (docs/event-log.md#writing-ahead)."""
        return self._host.record(*bodies, task=self.plan.task_id, ahead=ahead)

    def replace(
        self, call: ToolCall, name: str, arguments: str, rest: list[ToolCall]
    ) -> ToolResult | None:
        """Replace the task by the target's task and a continuation; ``None`` once replaced,
        else the tool error to answer the call with (docs/conv-tools.md#interrupt-and-switch)."""
        host = self._host
        caller = (host.id, host.context)
        made = replacement(
            self.plan, caller, (call, name, arguments), rest, host.deps, host.session, self.record
        )
        if isinstance(made, ToolResult):
            return made
        host.record_events(made)
        self._end("replace")
        return None

    # --- how it goes on ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the task: its context change, if it is one, else its first turn."""
        change = self.plan.context
        if change is None:
            self._next_turn()
        elif self._change_context(change, TaskCompleted()):
            self._end("complete")

    def on_model_finished(self, finished: ModelFinished) -> None:
        """Record the reply of the turn's request (or abort on its failure) and go on."""
        if finished.token != self.token:
            return  # a call whose turn was aborted: nothing of it is applied
        self._model_future = None
        reply = finished.reply
        if finished.error is not None or reply is None:
            why = finished.error or "the model call ended with no reply"
            self.abort("failed", "model", why, model_error=finished.error_kind)
            return
        deps = self.deps
        window, protocol = deps.history.context_window, deps.model_protocol
        bodies = model_reply.reply_bodies(reply, window, protocol, self._sent_tokens)
        if self._compacting is not None:
            self._summarised(reply.text, bodies)
            return
        cut_off = model_reply.cut_off(reply, protocol)
        if cut_off is not None or not reply.tool_calls:
            # The reply and the task's end belong together: one transaction, one fsync.
            self.record(*bodies, *(cut_off or [TaskCompleted(reply.text)]))
            self._end("complete")
            return
        host = self._host
        site = CallSite(host.id, self.plan.task_id, self.token, host.me)
        offered = {tool.name: tool for tool in self._tool_view.tools}
        batch = ToolBatch(self, site, list(reply.tool_calls), offered, host.context.tool_prefs)
        # Built-ins act only on the session, by events written after these: the reply and its
        # calls may be written with what follows (docs/event-log.md#writing-ahead).
        self.record(*bodies, *batch.opening(), ahead=batch.ahead)
        self._batch = batch
        self._move("reply_with_calls")
        self._went_on(batch.advance())

    def on_tool_finished(self, finished: ToolFinished) -> None:
        """A call ended on its server: the batch goes on."""
        if finished.token == self.token and self._batch is not None:
            self._went_on(self._batch.finished(finished.index, finished.result))

    def on_decision(self, finished: ApprovalFinished) -> None:
        """A call's approval was decided: the batch goes on (after a stop, it is dropped)."""
        if finished.token == self.token and self._batch is not None and self.stop is None:
            self._went_on(self._batch.decided(finished.index, finished.decision))

    def on_servers_settled(self, token: int) -> None:
        """The MCP servers the turn waited for are up, or gave up: the prompt is built."""
        if token == self.token and self.phase is Phase.AWAITING_SERVERS:
            self._move("servers_settled")
            self._prompt()

    def on_attempt_failed(self, failed: AttemptFailedNotice) -> None:
        """Record a failed attempt of the turn's request that will be retried."""
        if failed.token == self.token:
            self.record(
                ModelRequestFailed(failed.attempt, failed.error, failed.status, failed.retry_in_sec)
            )

    def stop_at_checkpoint(self, detail: str) -> None:
        """End the task at its next checkpoint, with the cause ``shutdown``
        (docs/interrupts.md#stopping-at-a-checkpoint): now, if nothing of its turn runs; else
        record ``StopRequested`` (replay feeds it in where it was recorded, so the program stops
        where it stopped), let the model's reply or the running calls end and be recorded, and
        start nothing more."""
        if self.stop is not None:
            return  # asked already
        if not self._running():
            self.abort("interrupted", "shutdown", detail)
            return
        self.record(StopRequested(detail))
        self.stop = detail
        if self._batch is not None:
            self._batch.stop_deciding()  # a call waiting for its approval will not run

    def abort(
        self,
        reason: Literal["interrupted", "replaced", "failed"],
        cause: AbortCause,
        detail: str,
        *after: Body,
        model_error: ModelErrorKind | None = None,
    ) -> None:
        """End the task now: cancel what it has out, record ``TurnAborted`` (then ``after``)
        as one group, and free the timeline."""
        by_interrupt = reason == "interrupted" and self.deps.interrupt_checkpoints
        found = self.checkpoint() if by_interrupt else Checkpoint.NONE
        counted: list[Body] = []
        if self._model_future is not None:
            self._model_future.cancel()  # closes the HTTP stream at once
            if by_interrupt:  # the request was sent, so it counts toward usage: estimated
                sent = self._sent_tokens()
                window = self.deps.history.context_window
                counted.append(TokensCounted(Usage(sent, 0, sent), window, estimated=True))
        if self._batch is not None:
            self._batch.cancel()
        try:
            aborted = TurnAborted(
                reason,
                cause,
                detail,
                checkpoint=int(found),  # type: ignore[arg-type]
                model_error=model_error,
            )
            self.record(aborted, *counted, *after)
        finally:
            self._end("abort")

    def checkpoint(self) -> Checkpoint:
        """Where an interrupt finds the turn (docs/interrupts.md#checkpoints)."""
        if self._batch is not None:
            return self._batch.checkpoint()
        # Every call of the last reply answered, and the next request not out (the turn waits
        # for MCP servers, or a compaction runs first).
        before_request = self._model_future is None or self._compacting is not None
        history = self._host.history()
        if before_request and history and history[-1].role == "tool":
            return Checkpoint.CALLS_ANSWERED
        return Checkpoint.NONE

    def instructions(self) -> str:
        """The system message of the task's turns: the conversation's base instructions (or
        the default), unless the task overrides them."""
        override = self.plan.base_instructions_override
        if override is not None:
            return as_text(override) or ""
        return as_text(self._host.context.base_instructions) or DEFAULT_INSTRUCTIONS

    # --- the loop ----------------------------------------------------------------------------

    def _move(self, transition: str) -> None:
        self.phase = moved(TRANSITIONS, transition, self.phase, "turn", self._named)

    def _named(self) -> str:
        return f"conversation {self._host.id}, task {self.plan.task_id}"

    def _end(self, transition: Literal["complete", "replace", "abort"]) -> None:
        self._move(transition)
        self._host.ended(self.plan.task_id)

    def _next_turn(self) -> None:
        self.number += 1
        self.token = self._host.new_token()
        self._prompt()

    def _prompt(self) -> None:
        """Build the turn's prompt and send it, once the MCP servers it needs have started."""
        if self._settled():
            return  # a stop was asked: no request starts
        host, deps = self._host, self.deps
        self._tool_view = ToolView()
        if deps.pool is not None:
            view = deps.pool.ask(ViewFor(frozen_names(host.context.mcp_allowlist)), timeout=30)
            self._tool_view = cast(ToolView, view)
            if self._tool_view.waiting and not self._waited:
                self._waited = True  # once per task: a late server is not waited for twice
                self._move("wait_for_servers")
                deps.pool.tell(AwaitServers(self._tool_view.waiting, self.token, host.me))
                return  # ServersSettled goes on
        trim = compaction.trimmed(deps.history, host.prompt_view, host.synced())
        if trim is not None:
            self.record(trim)
            host.synced()
        if self._compact():
            return  # the compaction's reply goes on
        instructions = self.instructions()
        prompt_view = host.prompt_view
        shape = deps.model_client.content_shape or prompt_view.empty
        options, responses = deps.model_options, None
        if options.wire_api == "responses":  # the history as input items, with their
            # reasoning items (docs/models.md#reasoning-items), after a stored response if it
            # goes on from one (docs/models.md#stored-responses)
            messages = _NO_MESSAGES
            responses = ResponsesInput(instructions, prompt_view.input_items())
            if options.store and (stored := prompt_view.goes_on_from()) is not None:
                responses = ResponsesInput(instructions, responses.items, *stored)
        else:
            messages = prompt_view.messages(instructions, shape=shape)
        tools, tools_sha = host.offered_tools(self._tool_view)
        self._compacted = False
        # The request is built from the log alone, so it may go out while its record (and a
        # task's start, made ahead) is being made durable: the fsync overlaps the network. Its
        # reply comes back as a message, after this handler; its text deltas are held until
        # the record is in the feeds.
        deltas = self._request(messages, tools, shape, "request", responses)
        if deltas is None:
            return  # the session is being stopped
        # The request goes first: writing the record meanwhile would hold the interpreter
        # lock the effect loop needs to send it (a new connection may take longer: not waited).
        deltas.sent.wait(SEND_FIRST_SEC)
        self.record(
            TurnStarted(self.number),
            ModelRequested(
                deps.model,
                tools_sha,
                canonical_sha256(instructions),
                prompt_view.sha256,
                len(prompt_view) + 1,
                wire_api=options.wire_api,
                store=responses is not None and options.store,
                previous_response_id=responses.previous_response_id if responses else "",
            ),
            ahead=True,
        )
        deps.journal.flush()
        deltas.open()

    def _compact(self) -> bool:
        """Start a compaction turn if it is asked for or the prompt nears the context window;
        True when one went out (or one asked for found nothing to do and ended the task)."""
        asked = self.plan.compact
        if asked is None and self._compacted:
            return False
        host, deps = self._host, self.deps
        prompt_view, history = host.prompt_view, host.history()
        due = compaction.compaction(
            deps.history, asked, host.prompt_tokens(), prompt_view, history, host.standing()
        )
        if due is None:
            return False
        if due == "nothing":  # nothing old enough to summarise but the last summary
            self.record(TaskCompleted())
            self._end("complete")
            return True
        self._compacting = due
        shape = deps.model_client.content_shape or prompt_view.empty
        protocol = deps.model_protocol
        messages, requested = compaction.request(
            due, deps.model, protocol, prompt_view, history, shape, deps.model_options.wire_api
        )
        deltas = self._request(messages, [], shape, "compact")
        if deltas is None:
            return True  # the session is being stopped: nothing went out, nothing goes on
        self.record(TurnStarted(self.number), requested)
        deltas.discard()
        return True

    def _summarised(self, summary: str, bodies: list[Body]) -> None:
        """Record the summary (after the reply's ``bodies``) in place of the older history,
        then go on with the task."""
        assert self._compacting is not None
        pending, self._compacting = self._compacting, None
        done = compaction.summarised(pending, summary, self._host.prompt_view)
        if done is None:
            self.record(*bodies)
            self.abort("failed", "error", "compaction failed: the model returned an empty summary")
            return
        if self.plan.compact is not None:
            self.record(*bodies, done, TaskCompleted())
            self._end("complete")
            return
        self.record(*bodies, done)
        self._compacted = True
        self._move("summarised")
        self._next_turn()

    def _request(
        self,
        messages: msgspec.Raw,
        tools: Tools,
        shape: ContentShape,
        transition: str,
        responses: ResponsesInput | None = None,
    ) -> HeldDeltas | None:
        """Send the turn's request (``model_call``) and take ``transition``; return its
        deltas, held until the request is recorded. ``None`` when the session is being stopped:
        nothing is sent."""
        host = self._host
        turn = (host.id, self.plan.task_id, self.token)
        sent = call_model(host.deps, host.me, turn, messages, tools, shape, responses)
        if sent is None:
            return None
        self._model_future, deltas = sent
        self._move(transition)
        return deltas

    def _went_on(self, advanced: Advanced) -> None:
        """Go on as the batch did: wait, loop the turn, or end the task at a stop."""
        if advanced is Advanced.STOPPED:
            assert self.stop is not None
            self.abort("interrupted", "shutdown", self.stop)
        elif advanced is Advanced.ANSWERED:
            assert self._batch is not None
            control, self._batch = self._batch.control, None
            self._move("calls_answered")
            # A context change a tool asked for applies from the next turn
            # (docs/conversations.md#context-changes).
            if control is None or self._change_context(control):
                self._next_turn()

    def _change_context(self, change: ContextChange, *after: Body) -> bool:
        """Record ``change`` (its allowlist checked first); False when it was refused, which
        ends the task."""
        if "mcp_allowlist" in change.changed and change.mcp_allowlist:
            checked = targets.check_allowlist(self.deps.pool, change.mcp_allowlist, self.record)
            if isinstance(checked, str):
                self.abort("failed", "error", f"context change refused: {checked}")
                return False
            change = msgspec.structs.replace(change, mcp_allowlist=checked)
        self.record(ConversationContextChanged(**msgspec.structs.asdict(change)), *after)
        return True

    def _settled(self) -> bool:
        """At a checkpoint: if a stop was asked and nothing of the turn runs any more, end the
        task here; return whether it ended."""
        if self.stop is None or self._running():
            return False
        self.abort("interrupted", "shutdown", self.stop)
        return True

    def _running(self) -> bool:
        """Whether the turn waits for something that runs: the model's reply (or a
        compaction's), or a call sent to its server. A call waiting for its approval, or for
        its turn, does not run."""
        if self._model_future is not None:
            return True
        return self._batch is not None and self._batch.checkpoint() is Checkpoint.CALL_RUNNING

    def _sent_tokens(self) -> int:
        """The estimated prompt tokens of the request out (the history has not changed since
        it went)."""
        if self._compacting is not None:
            return compaction.sent_tokens(self._compacting, self._host.prompt_view)
        return self._host.prompt_tokens() + approx_tokens(len(self.instructions()))
