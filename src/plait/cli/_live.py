"""What a person watching a session sees: text as it streams, tools, and which conversation
runs (the demo, ``plait chat`` and ``plait exec`` print it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from plait.cli._plan_view import plan_block
from plait.cli._spinner import Spinner
from plait.cli._style import PLAIN, Style
from plait.events import (
    AgentMessageDelta,
    Body,
    ConversationOpened,
    Event,
    HistoryCompacted,
    ModelRequested,
    ModelResponded,
    PlanUpdated,
    ReasoningDelta,
    TaskCompleted,
    TaskStarted,
    ToolCallCompleted,
    ToolCallRequested,
    Transient,
    TurnAborted,
)

__all__ = ["LivePrinter", "awaited", "history_line"]


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

    def __init__(
        self, root: str, out: TextIO, style: Style = PLAIN, spinner: Spinner | None = None
    ) -> None:
        self.root = root
        self.out = out
        self.style = style
        """The colours of names, tool calls and errors (``PLAIN``: none)."""
        self.spinner = spinner or Spinner(out, enabled=False)
        """What moves on the terminal while the model or a tool is awaited (off on a pipe)."""
        self.names: dict[str, str] = {root: "root"}
        self.speaking: str | tuple[str, str] | None = None
        """Who the last text was from (a conversation id), or whose reasoning it was."""
        self._fresh_line = False  # the spinner's line: the next "\n" is written already

    def __call__(self, item: Event | Transient) -> None:
        self.spinner.clear()
        self._print(item)
        waiting = awaited(item, None)
        if waiting is not None and self.spinner.enabled:
            if not self._fresh_line:
                self.out.write("\n")  # the spinner's own line, which the next line takes
                self.out.flush()
                self._fresh_line = True
            self.spinner.show(waiting)

    def close(self) -> None:
        """Erase the spinner, if it is drawn, and stop it."""
        self.spinner.close()

    def _write(self, text: str) -> None:
        if self._fresh_line:
            text, self._fresh_line = text.removeprefix("\n"), False
        self.out.write(text)

    def _print(self, item: Event | Transient) -> None:
        write: Callable[[str], Any] = self._write
        paint = self.style
        if isinstance(item, AgentMessageDelta):
            if self.speaking != item.conversation_id:
                write(f"\n{paint.cyan(self._name(item.conversation_id))}: ")
                self.speaking = item.conversation_id
            write(item.text)
            self.out.flush()
            return
        if isinstance(item, ReasoningDelta):
            # The reasoning itself is kept in the log (plait history --reasoning); here, only
            # why nothing is said yet.
            if self.speaking != ("reasoning", item.conversation_id):
                write("\n" + paint.dim(f"[{self._name(item.conversation_id)} is reasoning...]"))
                self.speaking = ("reasoning", item.conversation_id)
            return
        if not isinstance(item, Event):
            return
        body, conv = item.body, item.conversation_id
        line = None
        if isinstance(body, ConversationOpened) and conv is not None and conv != self.root:
            self.names[conv] = f"helper-{len(self.names)}"
            line = paint.cyan(f"[{self._name(conv)} opened by {self._name(body.parent_id)}]")
        elif isinstance(body, TurnAborted) and body.reason == "replaced":
            by = body.detail.split(" ")[0]
            line = paint.cyan(f"[{self._name(conv)}'s task is replaced by {by}]")
        elif isinstance(body, TaskStarted):
            line = paint.cyan(f"[{self._name(conv)} running]")
        elif isinstance(body, ToolCallRequested):
            line = f"  -> {paint.bold(body.tool)}{paint.dim(f'({body.arguments})')}"
        elif isinstance(body, ToolCallCompleted):
            output = f"{body.output}".replace("\n", "\n     ")
            line = f"  <- {paint.outcome(body.outcome)}: {paint.dim(output)}"
        elif isinstance(body, TaskCompleted):
            line = paint.cyan(f"[{self._name(conv)} done]")
        elif isinstance(body, PlanUpdated):
            line = plan_block(body, None if conv == self.root else self._name(conv))
        else:
            line = history_line(body)
        if line is not None:
            write(f"\n{line}")
            self.speaking = None

    def _name(self, conv: str | None) -> str:
        return self.names.get(conv or "", (conv or "?")[:8])


def awaited(item: Event | Transient, before: str | None) -> str | None:
    """What a person waits for after ``item``, for the spinner to say (``None``: nothing,
    text is coming)."""
    if isinstance(item, AgentMessageDelta):
        return None
    if not isinstance(item, Event):
        return before
    body = item.body
    if isinstance(body, ModelRequested):
        return "compacting the history" if body.purpose == "compact" else "waiting for the model"
    if isinstance(body, ToolCallRequested):
        return f"running {body.tool}"
    if isinstance(body, ModelResponded | TaskCompleted | TurnAborted):
        return None
    return before
