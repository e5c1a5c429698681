"""What a person watching a session sees: text as it streams, tools, and which conversation
runs (the demo, ``plait chat`` and ``plait exec`` print it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from plait.cli.plan_view import plan_block
from plait.events.types import (
    AgentMessageDelta,
    Body,
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelRequested,
    PlanUpdated,
    ReasoningDelta,
    TaskCompleted,
    TaskStarted,
    ToolCallCompleted,
    ToolCallRequested,
    Transient,
    TurnAborted,
)

__all__ = ["LivePrinter", "history_line"]


def history_line(body: Body) -> str | None:
    """The line that says a history is being or was compacted (a pause otherwise unexplained)."""
    if isinstance(body, ModelRequested) and body.purpose == "compact":
        return "[compacting the history...]"
    if isinstance(body, HistoryCompacted):
        if body.trigger == "bound":
            return f"[history bound: {body.kept_from} oldest messages removed]"
        return f"[history compacted: about {body.tokens_before} -> {body.tokens_after} tokens]"
    return None


class LivePrinter:
    """Renders a session's live feed: text as it streams, tools, and which conversation runs
    (the root is ``root``, the others ``helper-N`` in the order they open)."""

    def __init__(self, root: str, out: TextIO) -> None:
        self.root = root
        self.out = out
        self.names: dict[str, str] = {root: "root"}
        self.speaking: str | tuple[str, str] | None = None
        """Who the last text was from (a conversation id), or whose reasoning it was."""

    def __call__(self, item: Event | Transient) -> None:
        write: Callable[[str], Any] = self.out.write
        if isinstance(item, AgentMessageDelta):
            if self.speaking != item.conversation_id:
                write(f"\n{self._name(item.conversation_id)}: ")
                self.speaking = item.conversation_id
            write(item.text)
            self.out.flush()
            return
        if isinstance(item, ReasoningDelta):
            # The reasoning itself is kept in the log (plait history --reasoning); here, only
            # why nothing is said yet.
            if self.speaking != ("reasoning", item.conversation_id):
                write(f"\n[{self._name(item.conversation_id)} is reasoning...]")
                self.speaking = ("reasoning", item.conversation_id)
            return
        if not isinstance(item, Event):
            return
        body, conv = item.body, item.conversation_id
        line = None
        if isinstance(body, ConversationOpened) and conv is not None and conv != self.root:
            self.names[conv] = f"helper-{len(self.names)}"
            line = f"[{self._name(conv)} opened by {self._name(body.parent_id)}]"
        elif isinstance(body, TurnAborted) and body.reason == "replaced":
            line = f"[{self._name(conv)}'s task is replaced by {body.detail.split(' ')[0]}]"
        elif isinstance(body, TaskStarted):
            line = f"[{self._name(conv)} running]"
        elif isinstance(body, ToolCallRequested):
            line = f"  -> {body.tool}({body.arguments})"
        elif isinstance(body, ToolCallCompleted):
            line = f"  <- {body.outcome}: {body.output}".replace("\n", "\n     ")
        elif isinstance(body, TaskCompleted):
            line = f"[{self._name(conv)} done]"
        elif isinstance(body, PlanUpdated):
            line = plan_block(body, None if conv == self.root else self._name(conv))
        else:
            line = history_line(body)
        if line is not None:
            write(f"\n{line}")
            self.speaking = None

    def _name(self, conv: str | None) -> str:
        return self.names.get(conv or "", (conv or "?")[:8])
