"""``Session``: owns a session's conversations and answers the non-interrupting built-ins.

It holds the ``Scheduler`` and starts one ``Conversation`` actor per live conversation, opens new
conversations (``conv_create``), and answers ``conv_list``, ``conv_history`` and
``conv_destroy`` from its fold of the whole session's log; what runs and waits it reads from
the journal's task queue, as the scheduler does (one fold of it, ``_journal.py``). It never asks
another actor and waits (conversations ask it), so no two actors of a session can wait on each
other.
"""

from __future__ import annotations

import pykka

from plait.actors._actor import Actor
from plait.actors._builtins import ConvDestroy, ConvHistory, ConvSend
from plait.actors._conversation import Conversation
from plait.actors._deps import ConversationDeps
from plait.actors._messages import (
    Abort,
    BuiltinCall,
    Destroy,
    GetHistory,
    ListConversations,
    OpenConversation,
    RunTask,
    StartNext,
    TaskEnded,
)
from plait.actors._scheduler import MESSAGES, Scheduler
from plait.actors._seams import JournalLike
from plait.events import (
    ConversationDestroyed,
    ConversationOpened,
    Event,
    InputImage,
    InputText,
    NewEvent,
    Redacted,
    TaskDropped,
    TaskPlan,
    TurnAborted,
)
from plait.events.projections import (
    CONTEXTS,
    ApprovalsProjection,
    ApprovalState,
    ChatMessage,
    Histories,
    HistoryProjection,
    conversation_index,
)

__all__ = ["Session"]

NOT_FOUND = {"ok": False, "reason": "conversation not found"}


class Session(Actor):
    """The actor at the top of a session."""

    def __init__(
        self,
        journal: JournalLike,
        deps: ConversationDeps,
        root_id: str,
        past: list[Event],
        since: int,
    ) -> None:
        """Start from ``past``; what is recorded after it (from ``since``, the journal's
        ``mark`` where it ends), even before this actor's thread runs, is folded next: a
        recovery's re-run is (docs/replay.md#crashes)."""
        super().__init__()
        journal.listeners.listen(self.actor_ref, since)
        self.since = since
        self.journal = journal
        self.deps = deps
        self.root_id = root_id
        self.past = past
        self.projection = HistoryProjection()
        self.histories: Histories = self.projection.fold(past)
        self.approvals = ApprovalsProjection()
        self.approval_state = self.approvals.initial()
        """Policies and remembered approvals, handed to the conversations it opens."""
        self.contexts = CONTEXTS.initial()
        """Each conversation's context now: what the conversations it opens inherit."""
        self.conversations: dict[str, pykka.ActorRef[Conversation]] = {}
        self.scheduler = Scheduler(
            journal.stream,
            journal.tasks,
            self._record,
            self._catch_up,
            self._deliver,
            lambda: journal.lost,
            journal.when_durable,
            deps.task_gate,
            lambda: self.actor_ref.tell(StartNext()),  # a run slot is held for it now
        )
        self._fold(past)

    def startup(self) -> None:
        for cid, conv in self.histories.conversations.items():
            if conv.destroyed_at is None:  # from the same past, they fold what came after it
                self._spawn(cid, self.past, since=self.since)
        self.past = []

    def on_stop(self) -> None:
        self.journal.listeners.unlisten(self.actor_ref)
        for ref in self.conversations.values():
            self.journal.listeners.unlisten(ref)
            ref.stop(block=False)

    def _fold(self, events: list[Event] | tuple[Event, ...]) -> None:
        for event in events:
            self.approvals.apply(self.approval_state, event)
            CONTEXTS.apply(self.contexts, event)

    def _spawn(
        self,
        cid: str,
        past: list[Event],
        approvals: ApprovalState | None = None,
        since: int | None = None,
    ) -> None:
        ref = Conversation.start(cid, self.deps, self.actor_ref, past, approvals)
        self.conversations[cid] = ref
        self.journal.listeners.listen(ref, since)

    def _record(self, items: list[NewEvent], ahead: bool = False) -> list[Event]:
        events: list[Event] = self.journal.record(items, origin=self.actor_ref, ahead=ahead)
        self._take(events)
        return events

    def _catch_up(self) -> None:
        """Fold what the conversations recorded since this actor last looked."""
        if recorded := self.journal.listeners.recorded(self.actor_ref):
            self._take(recorded)

    def _take(self, events: list[Event]) -> None:
        for event in events:
            self.projection.apply(self.histories, event)
        self._fold(events)

    # --- messages ----------------------------------------------------------------------------

    def role(self, message: object) -> str:
        return "the scheduler" if isinstance(message, MESSAGES) else "the session"

    def answer_failed(self, message: object, error: Exception) -> object:
        # The session stops (docs/failures.md#supervision); a conversation that asked is answered.
        return {"ok": False, "reason": f"internal error: {error!r}"}

    def receive(self, message: object) -> object:
        self._catch_up()
        if isinstance(message, MESSAGES):
            return self.scheduler.receive(message)
        match message:
            case Abort():
                self._deliver(message)
            case OpenConversation():
                return self._open(message)
            case BuiltinCall(name="conv_list"):
                return self._list()
            case BuiltinCall(name="conv_history", arguments=ConvHistory() as args):
                return self._history(args)
            case BuiltinCall(name="conv_destroy", caller_id=caller, arguments=ConvDestroy() as a):
                return self._destroy(a.conversation_id, caller)
            case BuiltinCall(name="conv_send", caller_id=caller, arguments=ConvSend() as args):
                return self._check_target(args.conversation_id, caller)
            case Destroy(conversation_id=cid, caller_id=caller):
                return self._destroy(cid, caller)
            case ListConversations():
                return tuple(conversation_index(self.histories))
            case GetHistory(conversation_id=cid):
                conv = self.histories.conversations.get(cid)
                return None if conv is None else tuple(m.to_openai() for m in conv.messages)
        return None

    def _deliver(self, message: RunTask | Abort) -> None:
        """Hand a task the scheduler started to its conversation, or an abort to the running
        task's."""
        if isinstance(message, RunTask):
            ref = self.conversations.get(message.plan.conversation_id)
            try:
                if ref is not None:
                    ref.tell(message)  # it writes what was made ahead for the task
                    return
            except pykka.ActorDeadError:
                pass
            self.journal.flush()
            self._fail_orphan(message.plan)
            return
        with self.journal.tasks() as queue:
            running = queue.running
        if running is not None and running.task_id == message.task_id:
            ref = self.conversations.get(running.conversation_id)
            if ref is not None:
                ref.tell(message)

    def _fail_orphan(self, plan: TaskPlan) -> None:
        """End a started task whose conversation is not live (never opened, or destroyed
        after the task was queued), so the tasks behind it run."""
        detail = f"no conversation {plan.conversation_id} in session {self.journal.stream}"
        failed = TurnAborted("failed", "error", detail)
        self._record([NewEvent(failed, plan.conversation_id, plan.task_id)])
        self.actor_ref.tell(TaskEnded(plan.task_id))  # after this message: not from within it

    def _live(self, cid: str) -> bool:
        conv = self.histories.conversations.get(cid)
        return conv is not None and conv.destroyed_at is None and cid in self.conversations

    def _open(self, request: OpenConversation) -> dict[str, object]:
        parent = self.contexts.by_conversation.get(request.parent_id)
        if parent is None:
            return {"ok": False, "reason": f"unknown parent conversation {request.parent_id}"}
        cid = request.conversation_id
        opened = ConversationOpened(
            parent_id=request.parent_id,
            base_instructions=parent.base_instructions
            if request.inherit_base
            else request.base_instructions,
            mcp_allowlist=parent.mcp_allowlist
            if request.mcp_allowlist is None
            else list(request.mcp_allowlist),
            tool_prefs=parent.tool_prefs if request.tool_prefs is None else request.tool_prefs,
            storage_policy=parent.storage_policy,
            approval_policy=parent.approval_policy,  # a child asks at least what its parent does
        )
        events = self._record([NewEvent(opened, cid)])
        # It opens mid-session: it folds what it needs of the past from the session's state.
        state = self.approvals.load(self.approvals.save(self.approval_state))
        self._spawn(cid, events, state)
        return {"ok": True, "conversation_id": cid}

    def _list(self) -> dict[str, object]:
        return {
            "conversations": [
                {"id": i.id, "message_count": i.message_count, "last_active_at": i.last_active_at}
                for i in conversation_index(self.histories)
            ]
        }

    def _history(self, args: ConvHistory) -> dict[str, object]:
        if not self._live(args.conversation_id):
            return NOT_FOUND
        messages = self.histories.conversations[args.conversation_id].messages
        # Messages only, and tool outputs that carry images, as attachments (docs/conv-tools.md).
        shown = [m for m in messages if m.role != "tool" or isinstance(m.content, list)]
        entries = [_entry(m) for m in shown]
        entries = [e for e in entries if e is not None]
        if args.limit is not None:
            entries = entries[-args.limit :]
        return {"entries": entries}

    def _waiting(self, cid: str) -> bool:
        """Whether ``cid`` waits for a tool result in the current interrupt chain."""
        with self.journal.tasks() as queue:
            return any(
                plan.closure is not None and plan.conversation_id == cid for plan in queue.pending
            )

    def _check_target(self, cid: str, caller: str) -> dict[str, object]:
        if not self._live(cid):
            return NOT_FOUND
        if cid == caller:
            return {"ok": False, "reason": "a conversation cannot send to itself"}
        if self._waiting(cid):
            return {"ok": False, "reason": f"conversation {cid} is waiting in the current chain"}
        return {"ok": True}

    def _destroy(self, cid: str, caller: str | None) -> dict[str, object]:
        if not self._live(cid):
            return NOT_FOUND
        if cid == self.root_id:
            return {"ok": False, "reason": "the root conversation cannot be destroyed"}
        if cid == caller:
            return {"ok": False, "reason": "a conversation cannot destroy itself"}
        if self._waiting(cid):
            return {"ok": False, "reason": f"conversation {cid} is waiting in the current chain"}
        with self.journal.tasks() as queue:
            pending, running = list(queue.pending), queue.running
        dropped = [
            NewEvent(TaskDropped("conversation destroyed", "destroy"), cid, plan.task_id)
            for plan in pending
            if plan.conversation_id == cid
        ]
        task = running.task_id if running and running.conversation_id == cid else ""
        if not task:  # idle: its end is recorded now, before the caller goes on
            dropped.append(NewEvent(ConversationDestroyed("conversation destroyed"), cid))
        if dropped:
            self._record(dropped)
        ref = self.conversations.pop(cid)
        self.journal.listeners.unlisten(ref)
        if task:  # a running conversation records its own end: TurnAborted, the destruction
            ref.tell(Abort(task, "interrupted", "destroy", "conversation destroyed", destroy=True))
        else:
            ref.stop(block=False)
        return {"ok": True}


def _entry(message: ChatMessage) -> dict[str, object] | None:
    """Return a ``conv.history`` entry: role, text and image attachments (docs/conv-tools.md)."""
    content = message.content
    if content is None:
        return None  # an assistant turn made only of tool calls
    entry: dict[str, object] = {"role": message.role}
    if isinstance(content, list):
        texts = [p.text for p in content if isinstance(p, InputText) and isinstance(p.text, str)]
        images = [p.image_url for p in content if isinstance(p, InputImage)]
        if texts:
            entry["text"] = "\n".join(texts)
        if images:
            entry["attachments"] = [
                {"type": "image", "image_url": url if isinstance(url, str) else "[redacted]"}
                for url in images
            ]
    else:
        entry["text"] = content if isinstance(content, str) else _redacted(content)
    return entry


def _redacted(content: object) -> str:
    return content.text if isinstance(content, Redacted) else "[blob]"
