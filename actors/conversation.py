"""``Conversation``: one conversation's context, history and turn loop (seed 002).

A task runs as turns: build the prompt from the base instructions and the history, record
``TurnStarted`` and ``ModelRequested``, stream the model on the effect loop, record its reply,
run the tool calls in the model's order, and loop until the model answers without tool calls.
Model calls never block this actor: their results come back as ``ModelFinished`` messages
carrying the turn's token, so a reply that arrives after an abort is recognised and dropped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

import msgspec
import pykka

from plait.actors import builtins, targets
from plait.actors.approvals import (
    ApprovalGate,
    ApprovalRequest,
    ConversationApprovals,
    denial,
    refusal,
)
from plait.actors.builtins import ConvCreate, ConvSend
from plait.actors.journal import HeldDeltas
from plait.actors.mcp.names import canonical_sha256
from plait.actors.messages import (
    Abort,
    ApprovalFinished,
    AttemptFailedNotice,
    AwaitServers,
    BuiltinCall,
    CallTool,
    CancelCalls,
    ModelFinished,
    Recorded,
    RunTask,
    ServersSettled,
    TaskEnded,
    ToolFinished,
    ToolResult,
    ToolView,
    ViewFor,
)
from plait.actors.prompt import PromptView, approx_tokens, encoded, transcript
from plait.errors import ModelError
from plait.events.projections.approvals import ApprovalState
from plait.events.projections.history import (
    ChatMessage,
    Histories,
    HistoryProjection,
    safe_cut,
)
from plait.events.types import (
    AbortCause,
    AgentMessageDelta,
    Body,
    ConversationContextChanged,
    ConversationDestroyed,
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    NewEvent,
    ReasoningDelta,
    TaskCompleted,
    TaskEnqueued,
    TokensCounted,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
    TurnStarted,
)
from plait.events.values import (
    MODEL_PROTOCOL,
    Closure,
    ContextChange,
    HistorySettings,
    ModelOptions,
    TaskPlan,
    ToolCall,
    Usage,
    as_text,
)

__all__ = ["COMPACT_INSTRUCTIONS", "DEFAULT_INSTRUCTIONS", "Conversation", "ConversationDeps"]

log = logging.getLogger("plait")

DEFAULT_INSTRUCTIONS = (
    "You are a capable assistant working in a session of several conversations. "
    "Answer directly when you can; use the tools you are given when they help."
)
"""Base instructions of a conversation that names none (seed 001: the built-in default)."""

COMPACT_INSTRUCTIONS = (
    "You are compacting a conversation so it can go on within the model's context window. "
    "Summarise the messages you are given for your own later use: the user's goals and "
    "constraints, what was decided and done, the tool results that still matter (names, "
    "values, paths), and what is still open. Be complete and concise; write only the summary."
)
"""The instructions of a compaction turn (used for that turn only, never the conversation's)."""

CUT_OFF = frozenset({"length", "content_filter"})
"""Finish reasons of a reply the server stopped before it was whole."""

_TOOLS = builtins.builtin_specs()
_TOOLS_SHA = canonical_sha256(_TOOLS)


class ConversationDeps(msgspec.Struct, frozen=True):
    """What every conversation of a session shares: the journal, effects, model, settings."""

    journal: Any
    """The session's ``Journal``."""
    effects: Any
    """The runtime's ``EffectLoop``."""
    model_client: Any
    """The ``ModelClient``."""
    model: str
    """Model name, recorded in ``ModelRequested``."""
    new_id: Callable[[], str]
    """Makes task ids (they enter the log as data)."""
    workdir: str
    """Where ``base_instruction_file`` paths are resolved; files outside it are refused."""
    max_interrupt_chain_depth: int = 8
    """Nested interrupting tools allowed before the tool returns an error instead."""
    pool: Any = None
    """The session's ``McpPool``; ``None`` when it has no MCP servers."""
    history: HistorySettings = HistorySettings()
    """Compaction and history bounds."""
    interrupt_checkpoints: bool = True
    """Interrupts stop at seed 002's checkpoints (``False``: as sessions recorded before)."""
    approval_gate: Any = None
    """The runtime's ``ApprovalGate`` (replay's answers from the log); ``None``: no approver,
    so every call that must ask is denied."""
    model_protocol: int = MODEL_PROTOCOL
    """How requests are shaped and replies read (``RuntimeSettings.model_protocol``)."""
    model_options: ModelOptions = ModelOptions()
    """What each model request asks for beyond messages and tools."""


class _Batch(msgspec.Struct):
    """The tool calls of one model reply, being run."""

    calls: list[ToolCall]
    """In the model's order."""
    names: list[str | None]
    """Each call's canonical tool name; ``None``: no such tool here."""
    mcp: frozenset[str]
    """The names that are MCP tools (run by the pool)."""
    parallel: bool
    """All read-only: start them all at once."""
    started: int = 0
    """Calls started (a prefix)."""
    recorded: int = 0
    """Calls whose ``ToolCallCompleted`` is recorded (a prefix)."""
    results: dict[int, ToolResult] = {}
    """Ended calls not yet recorded, by index."""
    asks: list[str | None] = []
    """Why each call waits for an approval decision before it runs (``None``: it does not)."""
    awaiting: dict[int, Any] = {}
    """Calls started that wait for their decision, by index: the decision's future (an
    abort cancels it; the decision comes back as ``ApprovalFinished``)."""


def _refused(why: str) -> ToolResult:
    return ToolResult(why, "refused")


def _error(why: str) -> ToolResult:
    return ToolResult(why, "error")


class _Run(msgspec.Struct):
    """The task this conversation is running."""

    plan: TaskPlan
    turn: int = 0
    token: int = 0
    future: Any = None
    tools: _Batch | None = None
    view: ToolView = ToolView()
    """The MCP tools this turn offers."""
    waited: bool = False
    """Whether this task already waited for MCP servers still starting."""
    compacting: HistoryCompacted | None = None
    """A compaction request is out: the event its summary completes."""
    compacted: bool = False
    """The history was compacted for the coming turn (so it is not compacted twice)."""
    control: ContextChange | None = None
    """A context change a tool result of this turn asked for, applied before the next."""


class Conversation(pykka.ThreadingActor):
    """One conversation of a session; the session starts one actor per conversation."""

    def __init__(
        self,
        conversation_id: str,
        deps: ConversationDeps,
        session: Any,
        scheduler: Any,
        past: list[Event],
        approvals: ApprovalState | None = None,
    ) -> None:
        """``past``: the session's events (or only its opening, with the session's
        ``approvals`` so far, for a conversation opened mid-session)."""
        super().__init__()
        self.id = conversation_id
        self.deps = deps
        self.session = session
        self.scheduler = scheduler
        self.projection = HistoryProjection()
        self.histories: Histories = self.projection.initial()
        self.context = ConversationOpened()
        self.run: _Run | None = None
        self.token = 0
        self.view = PromptView(
            strict=deps.model_protocol >= 1, reasoning=deps.model_options.send_reasoning
        )
        self._reported: tuple[int, int] | None = None
        """(messages the last answered request sent, its prompt + completion tokens)."""
        self._sent = 0
        self._tools_key: tuple[bool, str] | None = None
        self._tools_cached: tuple[list[Any] | msgspec.Raw, str] = ([], "")
        self.approvals = ConversationApprovals(conversation_id, approvals)
        self._apply(past)

    # --- state -------------------------------------------------------------------------------

    def _apply(self, events: list[Event] | tuple[Event, ...]) -> None:
        for event in events:
            self.approvals.apply(event)  # keys and policies are the session's
            if event.conversation_id != self.id:
                continue
            self.projection.apply(self.histories, event)
            body = event.body
            if isinstance(body, ConversationOpened):
                self.context = body
            elif isinstance(body, ConversationContextChanged):
                self.context = body.applied(self.context)
                if body.clear_history:
                    self._reported = None
            elif isinstance(body, ModelRequested):
                self._sent = body.message_count - 1 if body.purpose == "turn" else -1
            elif isinstance(body, TokensCounted) and self._sent >= 0:
                usage = body.usage
                self._reported = (self._sent, usage.prompt_tokens + usage.completion_tokens)
            elif isinstance(body, HistoryCompacted):
                self._reported = None

    def _record(self, *bodies: Body, task: str | None = None) -> list[Event]:
        task_id = task if task is not None else (self.run.plan.task_id if self.run else None)
        return self._record_events([NewEvent(body, self.id, task_id) for body in bodies])

    def _record_events(self, items: list[NewEvent]) -> list[Event]:
        events: list[Event] = self.deps.journal.record(items, origin=self.actor_ref)
        self._apply(events)
        if events:
            self.approvals.now = events[-1].at
        return events

    def _history(self) -> list[ChatMessage]:
        conv = self.histories.conversations.get(self.id)
        return conv.messages if conv else []

    def _synced(self) -> list[ChatMessage]:
        """The history, with the prompt view brought up to date with it."""
        history = self._history()
        self.view.sync(history)
        return history

    def _prompt_tokens(self) -> int:
        """The history's tokens (the view is in sync): the model's count for what it was last
        sent, approximated for what came after (seed 002 "Token 追踪")."""
        if self._reported is None or self._reported[0] > len(self.view):
            return self.view.tokens()
        sent, tokens = self._reported
        return tokens + self.view.tokens(sent)

    # --- messages ----------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        try:
            return self._receive(message)
        except Exception as exc:
            # A bug or a store failure must end the task, not kill the actor and hang the
            # session: record why (if the store still takes it) and free the timeline.
            log.exception("conversation %s: %s failed", self.id, type(message).__name__)
            if self.run is not None and not isinstance(exc, pykka.ActorDeadError):
                with contextlib.suppress(Exception):
                    self._abort("failed", "error", f"internal error: {exc!r}")
            return None

    def _receive(self, message: Any) -> Any:
        match message:
            case Recorded(events=events):
                self._apply(events)
            case RunTask(plan=plan):
                narrowed = self.approvals.narrowed(plan.context)
                if narrowed is not None:
                    self._record(narrowed, task=plan.task_id)
                self._start(message)
            case ModelFinished():
                self._model_finished(message)
            case ToolFinished():
                self._tool_finished(message)
            case ApprovalFinished():
                self._approval_finished(message)
            case ServersSettled(token=token):
                if self.run is not None and self.run.token == token and self.run.future is None:
                    self._prompt()
            case AttemptFailedNotice():
                if self.run and message.token == self.run.token:
                    self._record(
                        ModelRequestFailed(
                            message.attempt, message.error, message.status, message.retry_in_sec
                        )
                    )
            case Abort(task_id=task_id, reason=reason, cause=cause, detail=detail, destroy=destroy):
                if self.run and self.run.plan.task_id == task_id:
                    extra = [ConversationDestroyed(detail)] if destroy else []
                    self._abort(reason, cause, detail, *extra)
                elif destroy:
                    self._record(ConversationDestroyed(detail), task=None)
                if destroy:
                    self.actor_ref.stop(block=False)
        return None

    # --- the turn loop -----------------------------------------------------------------------

    def _start(self, run: RunTask) -> None:
        self.run = _Run(run.plan)  # a continuation's answer came with its TaskStarted
        change = run.plan.context
        if change is None:
            self._next_turn()
        elif self._change_context(change, TaskCompleted()):
            self._end()

    def _change_context(self, change: ContextChange, *after: Body) -> bool:
        """Record ``change`` (its allowlist checked first); False when it was refused, which
        ends the task."""
        if "mcp_allowlist" in change.changed and change.mcp_allowlist:
            checked = targets.check_allowlist(self.deps.pool, change.mcp_allowlist, self._record)
            if isinstance(checked, str):
                self._abort("failed", "error", f"context change refused: {checked}")
                return False
            change = msgspec.structs.replace(change, mcp_allowlist=checked)
        self._record(ConversationContextChanged(**msgspec.structs.asdict(change)), *after)
        return True

    def _next_turn(self) -> None:
        assert self.run is not None
        run = self.run
        run.turn += 1
        self.token += 1
        run.token = self.token
        self._prompt()

    def _prompt(self) -> None:
        """Build the turn's prompt and send it, once the MCP servers it needs have started."""
        assert self.run is not None
        run = self.run
        run.view = ToolView()
        if self.deps.pool is not None:
            run.view = self.deps.pool.ask(ViewFor(self.context.mcp_allowlist), timeout=30)
            if run.view.waiting and not run.waited:
                run.waited = True  # once per task: a late server is not waited for twice
                self.deps.pool.tell(AwaitServers(run.view.waiting, run.token, self.actor_ref))
                return  # ServersSettled continues
        self._synced()
        self._bound()
        if self._compact():
            return  # the compaction's reply continues the turn
        instructions = self._instructions()
        view = self.view
        messages = view.messages(instructions)
        tools, tools_sha = self._tools(run.view)
        run.compacted = False
        # The request is built from the log alone, so it may go out while its record is being
        # made durable: the fsync overlaps the network. Its reply comes back as a message, after
        # this handler; its text deltas are held until the record is in the feeds.
        deltas = self._call_model(run.token, messages, tools)
        self._record(
            TurnStarted(run.turn),
            ModelRequested(
                self.deps.model,
                tools_sha,
                canonical_sha256(instructions),
                view.sha256,
                len(view) + 1,
            ),
        )
        deltas.open()

    def _instructions(self) -> str:
        """The system message of the task's turns: the conversation's base instructions (or
        the default), unless the task overrides them."""
        assert self.run is not None
        override = self.run.plan.base_instructions_override
        if override is not None:
            return as_text(override) or ""
        return as_text(self.context.base_instructions) or DEFAULT_INSTRUCTIONS

    def _sent_tokens(self) -> int:
        """The estimated prompt tokens of the request out (the history has not changed since
        it went)."""
        assert self.run is not None
        pending = self.run.compacting
        if pending is not None:
            summarised = self.view.tokens(0, pending.kept_from)
            return summarised + approx_tokens(len(COMPACT_INSTRUCTIONS))
        return self._prompt_tokens() + approx_tokens(len(self._instructions()))

    # --- compaction and bounds (seed 002 "上下文压缩", seed 003 §4.1) --------------------------

    def _bound(self) -> None:
        """Remove the oldest messages once past ``max_items``/``max_tokens`` (seed 003 §4.1),
        down to three quarters of the bound, so that trims come now and then, not every turn."""
        bounds, view = self.deps.history, self.view
        cut = 0
        if bounds.max_items is not None and len(view) > bounds.max_items:
            # Room for the note and the standing instructions.
            cut = len(view) - max(bounds.max_items * 3 // 4 - 2, 1)
        if bounds.max_tokens is not None and view.tokens() > bounds.max_tokens:
            cut = max(cut, view.first_within(bounds.max_tokens * 3 // 4))
        cut = safe_cut(self._history(), cut)
        if cut == 0:
            return
        limits = [f"{bounds.max_items} messages"] if bounds.max_items is not None else []
        if bounds.max_tokens is not None:
            limits.append(f"about {bounds.max_tokens} tokens")
        note = f"[{cut} earlier messages were removed: this history keeps {' and '.join(limits)}]"
        after = view.tokens(cut) + approx_tokens(len(note))
        self._record(HistoryCompacted(note, cut, view.tokens(), after, trigger="bound"))
        self._synced()

    def _compact(self) -> bool:
        """Start a compaction turn if it is asked for or the prompt nears the context window;
        True when one went out."""
        assert self.run is not None
        run, settings = self.run, self.deps.history
        manual = run.plan.compact is not None
        keep = settings.keep_recent_tokens if run.plan.compact is None else run.plan.compact
        window = settings.context_window
        if not manual:
            if run.compacted or window is None:
                return False
            if self._prompt_tokens() <= settings.compact_threshold * window:
                return False
        view, history = self.view, self._history()
        # The latest turns stay as they are, and at least the task's own input.
        last_input = next(
            (i for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), 0
        )
        kept_from = safe_cut(history, min(view.first_within(keep), last_input))
        conv = self.histories.conversations[self.id]
        standing = (conv.instructions, conv.summary)
        if all(any(m is s for s in standing) for m in history[:kept_from]):
            if manual:  # nothing old enough to summarise but the last summary
                self._record(TaskCompleted())
                self._end()
                return True
            return False
        before = self._prompt_tokens()
        run.compacting = HistoryCompacted(
            "", kept_from, before, 0, trigger="manual" if manual else "auto"
        )
        if self.deps.model_protocol >= 1:
            # The history as one text: servers differ on what they take of tool messages.
            text = {"role": "user", "content": transcript(history[:kept_from])}
            system = encoded({"role": "system", "content": COMPACT_INSTRUCTIONS})
            messages = msgspec.Raw(b"[%s,%s]" % (system, encoded(text)))
            sent, sha = 2, canonical_sha256(text)
        else:
            messages = view.messages(COMPACT_INSTRUCTIONS, kept_from)
            sent, sha = kept_from + 1, view.prefix_sha256(kept_from)
        deltas = self._call_model(run.token, messages, [])
        self._record(
            TurnStarted(run.turn),
            ModelRequested(
                self.deps.model,
                canonical_sha256([]),
                canonical_sha256(COMPACT_INSTRUCTIONS),
                sha,
                sent,
                purpose="compact",
            ),
        )
        deltas.discard()
        return True

    def _compacted(self, reply: Any, bodies: list[Body]) -> None:
        """Record the summary in place of the older history, then go on with the task."""
        assert self.run is not None and self.run.compacting is not None
        run, pending = self.run, self.run.compacting
        run.compacting = None
        summary = reply.text.strip()
        if not summary:
            self._record(*bodies)
            self._abort("failed", "error", "compaction failed: the model returned an empty summary")
            return
        after = self.view.tokens(pending.kept_from) + approx_tokens(len(summary))
        done = msgspec.structs.replace(pending, summary=summary, tokens_after=after)
        if run.plan.compact is not None:
            self._record(*bodies, done, TaskCompleted())
            self._end()
            return
        self._record(*bodies, done)
        run.compacted = True
        self._next_turn()

    def _tools(self, view: ToolView) -> tuple[list[Any] | msgspec.Raw, str]:
        """The turn's tool list, encoded, and its hash, once per (built-ins, MCP view)."""
        key = (self.context.tool_prefs.conversation_tools, view.sha256)
        if self._tools_key != key:
            tools = [*(_TOOLS if key[0] else ()), *view.specs]
            sha = _TOOLS_SHA if tools == _TOOLS else canonical_sha256(tools)
            self._tools_key, self._tools_cached = key, (encoded(tools) if tools else [], sha)
        return self._tools_cached

    def _call_model(
        self, token: int, messages: msgspec.Raw, tools: list[Any] | msgspec.Raw
    ) -> HeldDeltas:
        from plait.actors.model import ModelRequest

        assert self.run is not None
        me, journal, task = self.actor_ref, self.deps.journal, self.run.plan.task_id
        deltas = HeldDeltas(journal.publish)

        def on_text(text: str) -> None:
            deltas.publish(AgentMessageDelta(self.id, task, text))

        def on_reasoning(text: str) -> None:
            deltas.publish(ReasoningDelta(self.id, task, text))

        def on_attempt_failed(failed: Any) -> None:
            _tell(
                me,
                AttemptFailedNotice(
                    token, failed.attempt, failed.error, failed.status, failed.retry_in_sec
                ),
            )

        future: Future[Any] = self.deps.effects.submit(
            self.deps.model_client.complete(
                ModelRequest(messages, tools, self.deps.model_options),
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

        self.run.future = future
        future.add_done_callback(done)
        return deltas

    def _model_finished(self, finished: ModelFinished) -> None:
        run = self.run
        if run is None or finished.token != run.token:
            return  # a call whose turn was aborted: nothing of it is applied
        run.future = None
        if finished.error is not None:
            self._abort("failed", "model", finished.error, model_error=finished.error_kind)
            return
        reply = finished.reply
        calls = list(reply.tool_calls)
        bodies: list[Body] = [
            ModelResponded(reply.text, calls, reply.finish_reason, reply.usage, reply.reasoning)
        ]
        window, usage = self.deps.history.context_window, reply.usage
        if usage is not None:
            bodies.append(TokensCounted(usage, window))
        elif self.deps.model_protocol >= 1:  # the server sent none: count it ourselves
            bodies.append(TokensCounted(self._estimated(reply), window, estimated=True))
        if run.compacting is not None:
            self._compacted(reply, bodies)
            return
        cut_off = reply.finish_reason if reply.finish_reason in CUT_OFF else None
        if cut_off is not None and self.deps.model_protocol >= 1:
            self._cut_off(cut_off, reply.text, calls, bodies)
            return
        if not calls:
            # The reply and the task's end belong together: one transaction, one fsync.
            self._record(*bodies, TaskCompleted(reply.text))
            self._end()
            return
        self._run_tools(calls, bodies)

    def _estimated(self, reply: Any) -> Usage:
        """The reply's usage as plait counts it: the request as sent, the reply as received."""
        prompt = self._sent_tokens()
        sizes = [len(reply.text), len(reply.reasoning)]
        sizes += [len(c.name) + len(_arguments(c)) for c in reply.tool_calls]
        completion = approx_tokens(sum(sizes))
        return Usage(prompt, completion, prompt + completion)

    def _cut_off(self, why: str, text: str, calls: list[ToolCall], reply: list[Body]) -> None:
        """End the task with the reply the server stopped (``TaskCompleted.cut_off``): its
        text is kept; its calls, which may be cut short, are not run."""
        refused = f"not run: the reply was cut off (finish_reason {why}) before it was whole"
        self._record(
            *reply,
            *[ToolCallRequested(c.id, c.name, c.arguments) for c in calls],
            *[ToolCallCompleted(c.id, refused, "refused") for c in calls],
            TaskCompleted(text, cut_off=why),  # type: ignore[arg-type]
        )
        self._end()

    # --- tools (seed 002: all read-only, concurrently; otherwise serially in the model's order)

    def _run_tools(self, calls: list[ToolCall], reply: list[Body]) -> None:
        """Record the reply with its calls (one transaction, one fsync), then run them."""
        assert self.run is not None
        offered = {tool.name: tool for tool in self.run.view.tools}
        # A name the model made up, or of a tool outside this conversation's view, is None.
        names = [
            builtins.canonical_name(c.name) or (c.name if c.name in offered else None)
            for c in calls
        ]
        read_only = [
            name in builtins.READ_ONLY or (name in offered and offered[name].read_only)
            for name in names
        ]
        self._record(
            *reply,
            *[
                ToolCallRequested(call.id, name or call.name, call.arguments, read_only=ro)
                for call, name, ro in zip(calls, names, read_only, strict=True)
            ],
        )
        mcp = frozenset(name for name in names if name in offered)
        asks = self.approvals.reasons(names, offered)
        self.run.tools = _Batch(calls, names, mcp, parallel=all(read_only), asks=asks)
        self._advance_tools()

    def _advance_tools(self) -> None:
        """Start what may start, record what ended in the model's order, then loop the turn.

        Outputs are recorded in the model's order even when calls run concurrently, so the log
        (and a replay of it) does not depend on which call happened to finish first.
        """
        assert self.run is not None and self.run.tools is not None
        batch = self.run.tools
        while batch.recorded < len(batch.calls):
            index = batch.recorded
            if index in batch.results:
                result = batch.results.pop(index)
                call = batch.calls[index]
                self._record(result.completed(call.id))
                batch.recorded += 1
                if result.control is not None:
                    self.run.control = result.control  # the last one asked for holds
            elif batch.started <= index:
                last = len(batch.calls) if batch.parallel else index + 1
                while batch.started < last:
                    batch.started += 1
                    if self._start_tool(batch, batch.started - 1):
                        return  # the task was replaced by an interrupting tool
            else:
                # A call runs elsewhere, or waits for its approval: its ToolFinished (or
                # ApprovalFinished) continues the batch.
                return
        self.run.tools = None
        control, self.run.control = self.run.control, None
        # A context change a tool asked for applies from the next turn (seed 002 "上下文重建").
        if control is None or self._change_context(control):
            self._next_turn()

    def _start_tool(self, batch: _Batch, index: int) -> bool:
        """Run or start call ``index``; True when it replaced the task (conv_create/send)."""
        call, name = batch.calls[index], batch.names[index]
        arguments = _arguments(call)
        if name is None:
            batch.results[index] = _refused(f"unknown tool {call.name!r}: it is not offered here")
        elif name in batch.mcp:
            if batch.asks[index] is None or self._approved(batch, index, name, arguments):
                self._call_mcp(index)
        elif name in builtins.INTERRUPTING:
            outcome = self._interrupt(call, name, arguments, batch.calls[index + 1 :])
            if outcome is None:
                return True
            batch.results[index] = outcome
        else:
            batch.results[index] = self._builtin(name, arguments)
        return False

    def _call_mcp(self, index: int) -> None:
        """Send call ``index`` of the batch to its MCP server (``ToolFinished`` comes back)."""
        assert self.run is not None and self.run.tools is not None
        batch, task = self.run.tools, self.run.plan.task_id
        call, name = batch.calls[index], batch.names[index] or ""
        request = CallTool(
            self.id, task, call.id, self.run.token, index, name, _arguments(call), self.actor_ref
        )
        self.deps.pool.tell(request)

    def _tool_finished(self, finished: ToolFinished) -> None:
        run = self.run
        if run is None or run.tools is None or finished.token != run.token:
            return  # a call whose turn was aborted: nothing of it is applied
        run.tools.results[finished.index] = finished.result
        self._advance_tools()

    # --- approvals (seed 003 §3.5, §8) ---------------------------------------------------------

    def _approved(self, batch: _Batch, index: int, name: str, arguments: str) -> bool:
        """Whether a remembered approval lets call ``index`` run now; if none does, record the
        request and ask the gate, off this thread (``ApprovalFinished`` goes on)."""
        assert self.run is not None
        run, call = self.run, batch.calls[index]
        bodies, approved = self.approvals.check(call.id, name, arguments)
        reason = batch.asks[index] or ""
        if approved:
            self._record(*bodies)
            return True
        events = self._record(*bodies, ToolApprovalRequested(call.id, name, reason))
        if not events:
            return False  # the session is being stopped: nothing more is recorded or run
        request = ApprovalRequest(
            session_id=self.deps.journal.stream,
            conversation_id=self.id,
            task_id=run.plan.task_id,
            call_id=call.id,
            tool=name,
            arguments=arguments,
            reason=reason,
            policy=self.approvals.policy,
            requested_at=events[-1].at,
        )
        me, token = self.actor_ref, run.token
        gate = self.deps.approval_gate or ApprovalGate(None)
        future: Future[Any] = self.deps.effects.submit(gate.decide(request))
        batch.awaiting[index] = future

        def done(f: Future[Any]) -> None:
            if f.cancelled():
                return  # the turn was aborted
            error = f.exception()
            decision = f.result() if error is None else denial(request, "error", repr(error))
            _tell(me, ApprovalFinished(token, index, decision))

        future.add_done_callback(done)
        return False

    def _approval_finished(self, finished: ApprovalFinished) -> None:
        """Record the decision, then send the call to its server or answer it refused."""
        run = self.run
        if run is None or run.tools is None or finished.token != run.token:
            return  # a decision that came after its turn was aborted: dropped
        batch, index, decision = run.tools, finished.index, finished.decision
        if batch.awaiting.pop(index, None) is None:
            return
        self._record(decision)
        if decision.approved:
            self._call_mcp(index)
            return
        batch.results[index] = _refused(refusal(decision))
        self._advance_tools()

    def _builtin(self, name: str, arguments: str) -> ToolResult:
        parsed = builtins.parse_arguments(name, arguments)
        if isinstance(parsed, str):
            return _error(parsed)
        started = time.monotonic()  # the duration enters the log as data
        result = self.session.ask(BuiltinCall(self.id, name, parsed), timeout=30)
        elapsed = (time.monotonic() - started) * 1000
        return ToolResult(msgspec.json.encode(result).decode(), "ok", elapsed)

    # --- interrupting tools (seed 000) -------------------------------------------------------

    def _interrupt(
        self, call: ToolCall, name: str, arguments: str, rest: list[ToolCall]
    ) -> ToolResult | None:
        """Replace this task by the target's task and a continuation; ``None`` once replaced,
        else the tool error to answer the call with."""
        assert self.run is not None
        parsed = builtins.parse_arguments(name, arguments)
        depth = self.run.plan.chain_depth + 1
        if isinstance(parsed, str):
            return _error(parsed)
        assert isinstance(parsed, ConvCreate | ConvSend)  # the interrupting built-ins
        if depth > self.deps.max_interrupt_chain_depth:
            limit = self.deps.max_interrupt_chain_depth
            return _error(f"{name} refused: interrupt chain depth limit {limit} reached")
        target = targets.resolve(
            parsed, self.id, self.context, self.deps, self.session, lambda b: self._record(b)
        )
        if isinstance(target, str):
            return _error(msgspec.json.encode({"ok": False, "reason": target}).decode())
        target_id, items, first_message = target
        new_task = TaskPlan(self.deps.new_id(), target_id, items, chain_depth=depth)
        closure = Closure(
            call.id,
            name,
            target_task_id=new_task.task_id,
            target_conversation_id=target_id,
            first_user_message=first_message if name == "conv_create" else None,
            first_items_count=len(items) if name == "conv_create" else None,
        )
        continuation = TaskPlan(self.deps.new_id(), self.id, closure=closure, chain_depth=depth)
        # The task's end and the plans that replace it are one group: a crash keeps both or
        # neither, so the call is never left waiting for a continuation that was not queued.
        task_id = self.run.plan.task_id
        ended = [
            *[
                ToolCallCompleted(later.id, "aborted: replaced", "error", aborted_by="replaced")
                for later in rest
            ],
            TurnAborted(
                "replaced", "replaced", f"{name} -> {target_id}", awaiting_call_ids=[call.id]
            ),
        ]
        queued = [
            NewEvent(TaskEnqueued(plan, front=True), plan.conversation_id, plan.task_id)
            for plan in (new_task, continuation)
        ]
        self._record_events([NewEvent(body, self.id, task_id) for body in ended] + queued)
        self._end()
        return None

    # --- ending ------------------------------------------------------------------------------

    def _abort(
        self,
        reason: str,
        cause: AbortCause,
        detail: str,
        *after: Body,
        model_error: str | None = None,
    ) -> None:
        assert self.run is not None
        run = self.run
        by_interrupt = reason == "interrupted" and self.deps.interrupt_checkpoints
        checkpoint = self._checkpoint() if by_interrupt else 0
        counted: list[Body] = []
        if run.future is not None:
            run.future.cancel()  # closes the HTTP stream at once
            if by_interrupt:  # the request was sent, so it counts toward usage: estimated
                window = self.deps.history.context_window
                sent = self._sent_tokens()
                tokens = Usage(sent, 0, sent)
                counted.append(TokensCounted(tokens, window, estimated=True))
        if run.tools is not None:
            for deciding in run.tools.awaiting.values():
                deciding.cancel()  # a call waiting for its approval waits no more
            if run.tools.mcp:
                self.deps.pool.tell(CancelCalls(self.id, run.token))
        try:
            aborted = TurnAborted(
                reason,  # type: ignore[arg-type]
                cause,
                detail,
                checkpoint=checkpoint,
                model_error=model_error,  # type: ignore[arg-type]
            )
            self._record(aborted, *counted, *after)
        finally:
            self._end()

    def _checkpoint(self) -> Literal[0, 1, 2, 3, 4]:
        """Where an interrupt finds the turn (seed 002 "中断机制"; ``TurnAborted.checkpoint``
        says what the history gets at each)."""
        assert self.run is not None
        run, batch = self.run, self.run.tools
        if batch is None:
            # Every call of the last reply answered, and the next request not out (the turn
            # waits for MCP servers, or a compaction runs first): checkpoint 2.
            before_request = run.future is None or run.compacting is not None
            history = self._history()
            return 2 if before_request and history and history[-1].role == "tool" else 0
        unanswered = range(batch.recorded, batch.started)
        if any(i not in batch.results and i not in batch.awaiting for i in unanswered):
            return 4  # a call is running
        if batch.recorded or batch.results:
            return 3  # a call has not begun (it waits for approval, or its turn)
        return 1  # the reply is recorded and no call has begun

    def _end(self) -> None:
        assert self.run is not None
        task_id = self.run.plan.task_id
        self.run = None
        self.scheduler.tell(TaskEnded(task_id))


def _arguments(call: ToolCall) -> str:
    """The call's arguments as the model sent them (``{}`` if the log no longer has them)."""
    return call.arguments if isinstance(call.arguments, str) else "{}"


def _tell(ref: Any, message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):  # the session closed meanwhile
        ref.tell(message)
