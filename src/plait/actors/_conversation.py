"""``Conversation``: the actor that holds one conversation and runs its tasks.

It keeps the conversation's history, context and approvals as projections of the session's
events, and hands each task it is given to a ``Turn``, which runs it turn by turn as one state
machine (docs/conversations.md#a-turns-states); the actor only passes the turn the messages it
is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from plait.actors import _builtins as builtins
from plait.actors._actor import Actor
from plait.actors._approvals import ConversationApprovals
from plait.actors._deps import ConversationDeps
from plait.actors._messages import (
    Abort,
    ApprovalFinished,
    AttemptFailedNotice,
    ModelFinished,
    RunTask,
    ServersSettled,
    TaskEnded,
    ToolFinished,
    ToolView,
)
from plait.actors._prompt import PromptView, empty_content, encoded
from plait.actors._refs import Askable, Recipient
from plait.actors._token_count import TokenCount
from plait.actors._turn import Turn
from plait.actors.mcp import canonical_sha256
from plait.events import Body, ConversationDestroyed, ConversationOpened, Event, NewEvent
from plait.events.projections import (
    CONTEXTS,
    ApprovalState,
    ChatMessage,
    Histories,
    HistoryProjection,
)

__all__ = ["Conversation"]

_BUILTIN_TOOLS = builtins.builtin_specs()
_BUILTIN_TOOLS_SHA = canonical_sha256(_BUILTIN_TOOLS)
_PLAN_TOOL = builtins.plan_spec()


class Conversation(Actor):
    """One conversation of a session; the session starts one actor per conversation.

    Other actors speak to it in messages only; its public members are what its running
    ``Turn`` needs of it (``TurnHost``).
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
        self.turn: Turn | None = None
        """The running task's turn, if a task runs."""
        self.prompt_view = PromptView(
            strict=deps.model_protocol >= 1,
            reasoning=deps.model_options.send_reasoning,
            empty=empty_content(deps.model_protocol),
            items=deps.model_options.wire_api == "responses",
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
    def me(self) -> Recipient:
        """This actor, as what its turn sends out answers it."""
        return self.actor_ref

    @property
    def context(self) -> ConversationOpened:
        """This conversation's context now: as it opened, each change applied."""
        return self.contexts.by_conversation.get(self.id) or ConversationOpened()

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
        task_id = task if task is not None else (self.turn.plan.task_id if self.turn else None)
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

    def standing(self) -> tuple[ChatMessage | None, ChatMessage | None]:
        """The instructions and the summary the history opens with."""
        own = self.histories.conversations[self.id]
        return own.instructions, own.summary

    def synced(self) -> list[ChatMessage]:
        """The history, with the prompt view brought up to date with it."""
        history = self.history()
        self.prompt_view.sync(history)
        return history

    def prompt_tokens(self) -> int:
        """The history's tokens (the prompt view is in sync): the model's count for what it
        was last sent, approximated for what came after (docs/compaction.md#when-it-runs)."""
        return self.token_count.of(self.prompt_view)

    def offered_tools(
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

    def new_token(self) -> int:
        """A turn token no other turn of this actor has."""
        self._tokens_issued += 1
        return self._tokens_issued

    def ended(self, task_id: str) -> None:
        """Forget the running task (its end is recorded); tell the scheduler it ended if a
        task waits to start (if none did, a task queued since starts as it is queued)."""
        self.turn = None
        if self.journal.waiting:
            self.session.tell(TaskEnded(task_id))

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
        turn = self.turn
        match message:
            case RunTask(plan=plan):
                narrowed = self.approvals.narrowed(plan.context)
                if narrowed is not None:
                    self.record(narrowed, task=plan.task_id)
                # A continuation's answer came with its TaskStarted.
                self.turn = Turn(self, plan)
                self.turn.start()
            case ModelFinished() if turn is not None:
                turn.on_model_finished(message)
            case ToolFinished() if turn is not None:
                turn.on_tool_finished(message)
            case ApprovalFinished() if turn is not None:
                turn.on_decision(message)
            case ServersSettled(token=token) if turn is not None:
                turn.on_servers_settled(token)
            case AttemptFailedNotice() if turn is not None:
                turn.on_attempt_failed(message)
            case Abort(task_id=task_id, detail=detail, at_checkpoint=True):
                if turn is not None and turn.plan.task_id == task_id:
                    turn.stop_at_checkpoint(detail)
            case Abort(task_id=task_id, reason=reason, cause=cause, detail=detail, destroy=destroy):
                if turn is not None and turn.plan.task_id == task_id:
                    extra = [ConversationDestroyed(detail)] if destroy else []
                    turn.abort(reason, cause, detail, *extra)
                elif destroy:
                    self.record(ConversationDestroyed(detail), task=None)
                if destroy:
                    self.actor_ref.stop(block=False)
        return None
