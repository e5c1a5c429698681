"""What the ``plait`` command prints: rows for people, JSON Lines for scripts, the live view.

Nothing here reads a store or the configuration: the commands decide what to show, this
module only how. Text for people is one line per thing, long values cut to fit; ``--json``
output is one JSON object a line, nothing cut.
"""

from __future__ import annotations

from typing import Any, TextIO

import msgspec

from plait.cli._live import awaited, history_line
from plait.cli._plan_view import plan_block, show_plans
from plait.cli._spinner import Spinner
from plait.cli._style import PLAIN, Style
from plait.cli._task_chain import TaskChain
from plait.cli._words import count
from plait.events import (
    AgentMessageDelta,
    BlobRef,
    Content,
    ConversationOpened,
    Event,
    Lease,
    McpServerFailed,
    McpServerReady,
    ModelRequested,
    ModelRequestFailed,
    ModelResponded,
    PlanUpdated,
    Redacted,
    TaskCompleted,
    ToolCallCompleted,
    ToolCallRequested,
    Transient,
    TurnAborted,
    Verification,
    to_jsonl,
)
from plait.events.projections import (
    AuditProjection,
    ConversationInfo,
    HistoryProjection,
    TokensProjection,
    conversation_index,
)

__all__ = [
    "ExecPrinter",
    "audit_fields",
    "conversation_row",
    "event_json",
    "failure_line",
    "json_line",
    "left_fields",
    "left_row",
    "message_row",
    "recovery_row",
    "show_session",
]

WIDTH = 160
"""Characters of a value shown on one line before it is cut."""

_encode = msgspec.json.Encoder().encode


def json_line(value: Any) -> str:
    """Return ``value`` as one line of JSON, newline included."""
    return _encode(value).decode() + "\n"


def event_json(event: Event) -> str:
    """Return an event as ``plait log --json`` prints it: one line, hashes included."""
    return b"".join(to_jsonl([event])).decode()


def cut(text: str, width: int = WIDTH) -> str:
    """Return ``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def shown(content: Content | None) -> str:
    """Return content as people read it: its text, or what stands for it in the log."""
    if isinstance(content, Redacted):
        return content.text
    if isinstance(content, BlobRef):
        return f"[blob sha256:{content.sha256}]"
    return content or ""


def message_row(message: dict[str, Any]) -> str:
    """Return one message of ``plait history`` (an OpenAI chat message) as one line."""
    content = message.get("content")
    if isinstance(content, list):  # text and image parts
        content = " ".join(p.get("text", "[image]") for p in content if isinstance(p, dict))
    calls = "".join(
        f" -> {c['function']['name']}({c['function']['arguments']})"
        for c in message.get("tool_calls", [])
    )
    answering = f" ({message['tool_call_id']})" if "tool_call_id" in message else ""
    line = f"{message['role']:>9}{answering}: {' '.join(str(content or '').split())}{calls}"
    if message.get("reasoning"):  # plait history --reasoning
        line = f"{'reasoning':>9}: {' '.join(str(message['reasoning']).split())}\n{line}"
    return line


def conversation_row(info: ConversationInfo) -> str:
    """Return one row of ``plait conversations``."""
    parent = f"created by {info.parent_id[:8]}" if info.parent_id else "root"
    return (
        f"{info.id}  {parent:<19} {info.message_count:>4} messages  "
        f"created {info.created_at}  last active {info.last_active_at}"
    )


def audit_fields(row: Any) -> dict[str, Any]:
    """Return one row of ``plait audit --json`` (a ``plait.replay.AuditRow``): its fields,
    the session's id as ``session_id``."""
    fields: dict[str, Any] = msgspec.to_builtins(row)
    return {"session_id": fields.pop("stream"), **fields}


def compaction_row(conversation_id: str, compacted: Any) -> str:
    """Return what ``plait compact`` did (a ``HistoryCompacted``)."""
    return (
        f"{conversation_id[:8]}  compacted: messages before #{compacted.kept_from} summarised, "
        f"about {compacted.tokens_before} -> {compacted.tokens_after} tokens"
    )


def recovery_row(recovery: Any) -> str:
    """Return one row of ``plait recover`` (a ``plait.Recovery``)."""
    crashed = f"task {recovery.crashed_task} crashed" if recovery.crashed_task else "none running"
    state = f"not resumed: {recovery.not_resumed}" if recovery.not_resumed else "resumed"
    return f"{recovery.session_id}  {crashed}, {recovery.waiting} waiting: {state}"


OWNER_PROCESS = {
    "live": "live",
    "dead": "dead",
    "elsewhere": "on another machine",
    "unknown": "not known to be dead",
}
"""What ``plait recover`` says of the owner of a session it left (``liveness.OwnerState``)."""


def left_fields(session_id: str, lease: Lease, process: str) -> dict[str, Any]:
    """Return the ``plait recover --json`` row of a session left to the owner of ``lease``,
    whose process is ``process`` (``live``, ``dead``, ``elsewhere`` or ``unknown``)."""
    return {
        "session_id": session_id,
        "left": True,
        "owner": lease.owner,
        "owner_process": process,
        "lease_remaining_sec": round(max(lease.remaining_sec, 0.0), 1),
    }


def left_row(fields: dict[str, Any]) -> str:
    """Return the ``plait recover`` row of a session left to its owner: who, and how long its
    lease has left."""
    process = OWNER_PROCESS.get(fields["owner_process"], fields["owner_process"])
    return (
        f"{fields['session_id']}  left: owned by {fields['owner']} ({process}), "
        f"lease {fields['lease_remaining_sec']:.1f} s left"
    )


def failure_line(outcome: Any, api_key_env: str) -> str:
    """Return why a task (a ``TaskOutcome``) did not complete, and what to do about it."""
    detail = outcome.detail or "no detail"
    if outcome.status == "model_error":
        if outcome.error_kind == "auth":
            return f"{detail}; the key is read from ${api_key_env}"
        if outcome.error_kind == "unavailable" and "cannot reach" in detail:
            return f"{detail} (is it running? model.base_url says where)"
        return str(detail)
    if outcome.status == "truncated":
        return f"the answer is incomplete: {detail} (model.max_output_tokens sets the cap)"
    if outcome.status == "filtered":
        return f"the answer is incomplete: {detail}"
    return f"task {outcome.task_id} {outcome.status}: {detail}"


def show_session(events: list[Event], report: Verification, out: TextIO) -> None:
    """Print what ``plait show`` shows: conversations, histories, audit, plans, tokens,
    chain."""
    session = report.stream
    histories = HistoryProjection().fold(events)
    out.write("\nconversations\n")
    for info in conversation_index(histories, session):
        parent = f"  (created by {info.parent_id[:8]})" if info.parent_id else "  (root)"
        active = f"last active {info.last_active_at}"
        out.write(f"  {info.id[:8]}  {info.message_count:>2} messages  {active}{parent}\n")
    for conv in histories.conversations.values():
        out.write(f"\nhistory of {conv.id[:8]}\n")
        for message in conv.messages:
            out.write(f"  {message_row(message.to_openai())}\n")
    out.write("\ntool calls (audit)\n")
    for row in AuditProjection().fold(events).rows:
        out.write(
            f"  seq {row.seq:>3}  {row.tool:<12} {row.outcome:<7} {row.duration_ms or 0:>6.1f} ms"
            f"  conversation {str(row.conversation_id)[:8]}  args {shown(row.arguments)}\n"
        )
    show_plans(events, out)
    tokens = TokensProjection().fold(events).by_session.get(session)
    if tokens is not None:
        out.write(
            f"\ntokens: {tokens.prompt_tokens} prompt + {tokens.completion_tokens} completion\n"
        )
    state = "intact" if report.ok else f"BROKEN at seq {report.first_bad_seq}: {report.reason}"
    out.write(f"\nhash chain: {report.events} events, {state}\n")


class ExecPrinter:
    """Renders the live feed of ``plait exec``.

    For people: the assistant text of the task's conversation goes to ``out`` as it streams,
    each reply ending its line; tool calls, MCP servers and other conversations go to ``err``.
    Once told the task (``follow``), only its chain is shown, and each reply's text is also
    taken from its ``ModelResponded``, as it is recorded: a follower gets no text deltas (they
    reach only the owner's feeds), and what the deltas showed is not shown twice
    (docs/processes.md#following-from-the-command-line). With ``json``: every event (as
    ``plait log --json`` prints it) and every text delta (``{"type": "AgentMessageDelta",
    ...}``) goes to ``out``, one JSON object a line. An event at or below ``last_seq`` was
    printed already and is skipped.
    """

    def __init__(
        self,
        conversation_id: str,
        out: TextIO,
        err: TextIO,
        *,
        json: bool,
        style: Style = PLAIN,
        spinner: Spinner | None = None,
    ) -> None:
        self.conversation_id = conversation_id
        """The conversation whose text is the answer."""
        self.out = out
        self.err = err
        self.json = json
        self.style = style
        """The colours of the lines on ``err`` (``PLAIN``: none)."""
        self.spinner = spinner if spinner is not None and not json else Spinner(err, enabled=False)
        """What moves on the terminal while nothing is printed (off on a pipe)."""
        self.last_seq = 0
        """The last event printed."""
        self.chain: TaskChain | None = None
        """The task shown, with the tasks it leads to (``None``: every task)."""
        self._open_line = False  # text went to ``out`` without its newline yet
        self._waiting: str | None = None  # what the spinner says is awaited
        self._streamed = ""  # the text deltas showed of the reply being recorded
        self._compacting = False  # the reply awaited is a summary, not an answer

    def follow(self, task_id: str) -> None:
        """Show only task ``task_id`` and the tasks it leads to from now on."""
        self.chain = TaskChain(task_id)

    def waiting(self, what: str | None) -> None:
        """Say, with the spinner, what is awaited now (``None``: nothing)."""
        self._waiting = what
        if what is not None and not self._open_line:
            self.spinner.show(what)
        else:
            self.spinner.clear()

    def __call__(self, item: Event | Transient) -> None:
        """Print one item of the feed."""
        if isinstance(item, Event):
            if item.seq <= self.last_seq:
                return
            self.last_seq = item.seq
            if self.chain is not None and not self.chain.see(item) and not self.json:
                return
        elif isinstance(item, AgentMessageDelta) and not self._shown(item.task_id):
            return
        self.spinner.clear()
        self._print(item)
        self.waiting(awaited(item, self._waiting))

    def _print(self, item: Event | Transient) -> None:
        if self.json:
            self.out.write(event_json(item) if isinstance(item, Event) else json_line(item))
            self.out.flush()
        elif isinstance(item, AgentMessageDelta):
            if item.conversation_id == self.conversation_id and item.text:
                self._streamed += item.text
                self._write(item.text)
        elif isinstance(item, Event):
            mine = item.conversation_id == self.conversation_id
            if mine and isinstance(item.body, ModelRequested):
                self._compacting = item.body.purpose == "compact"
            if mine and isinstance(item.body, ModelResponded) and not self._compacting:
                text = item.body.text
                self._recorded(text if isinstance(text, str) else "")  # not kept: not shown
            if mine and isinstance(item.body, ModelResponded | TurnAborted | TaskCompleted):
                self.end_line()
                self._streamed = ""
            line = self._progress(item, mine, self.style)
            if line is not None:
                self.err.write(line + "\n")
                self.err.flush()

    def _shown(self, task_id: str) -> bool:
        """Whether the items of task ``task_id`` are shown."""
        return self.json or self.chain is None or task_id in self.chain

    def _recorded(self, text: str) -> None:
        """Show what a reply recorded with ``text`` adds to what its deltas showed: all of it
        on a follower, the rest of it on an owner whose feed fell behind."""
        if text.startswith(self._streamed):
            self._write(text[len(self._streamed) :])

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._open_line = not text.endswith("\n")

    def end_line(self) -> None:
        """End the streamed text's line, if it is open."""
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False

    @staticmethod
    def _progress(event: Event, mine: bool, style: Style = PLAIN) -> str | None:
        body = event.body
        where = "" if mine else style.cyan(f"[{(event.conversation_id or '-')[:8]}]") + " "
        if isinstance(body, McpServerReady):
            return style.dim(f"[mcp {body.server}: ready, {count(len(body.tools), 'tool')}]")
        if isinstance(body, McpServerFailed):
            again = f"; again in {body.retry_in_sec:g} s" if body.retry_in_sec is not None else ""
            return style.red(f"[mcp {body.server}: failed: {cut(body.reason)}{again}]")
        if isinstance(body, ConversationOpened) and body.parent_id is not None:
            opened = (event.conversation_id or "-")[:8]
            return style.cyan(f"[conversation {opened} opened by {body.parent_id[:8]}]")
        if isinstance(body, ToolCallRequested):
            args = style.dim(f"({cut(shown(body.arguments), 100)})")
            return f"  {where}-> {style.bold(body.tool)}{args}"
        if isinstance(body, ToolCallCompleted):
            outcome = style.outcome(body.outcome)
            return f"  {where}<- {outcome}: {style.dim(cut(shown(body.output), 100))}"
        if isinstance(body, ModelResponded) and where and shown(body.text):
            return f"  {where}{cut(shown(body.text))}"
        if isinstance(body, ModelRequestFailed) and body.retry_in_sec is not None:
            error = f"[model: attempt {body.attempt} failed: {cut(body.error)}; retrying]"
            return style.yellow(error)
        if isinstance(body, PlanUpdated):
            return plan_block(body, None if mine else (event.conversation_id or "-")[:8])
        line = history_line(body)
        return None if line is None else f"{where}{line}"
