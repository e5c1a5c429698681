"""The tables of the commands that read a session: the rows of ``plait log``, ``audit`` and
``stats``, and the line that names their columns, which a terminal gets first.

A table's rows are the same on a terminal, in a pipe and in a file (colour aside); only a
terminal gets the header line, so that ``grep``, ``awk`` and ``wc -l`` see rows only.
``--json`` is printed elsewhere (``_output.py``), never with a header.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any, TextIO

import msgspec

from plait.cli._output import WIDTH, cut, json_line
from plait.cli._style import PLAIN, Style
from plait.events import (
    ConversationOpened,
    Event,
    McpServerFailed,
    ModelRequestFailed,
    SessionClosed,
    SessionStarted,
    TaskCompleted,
    ToolCallCompleted,
    ToolCallRequested,
    TurnAborted,
)

__all__ = [
    "AUDIT_HEADER",
    "LOG_HEADER",
    "STATS_HEADER",
    "audit_row",
    "event_row",
    "line_width",
    "stats_row",
    "wants_header",
]


def wants_header(args: Any, stream: TextIO) -> bool:
    """Whether a table printed to ``stream`` starts with a line naming its columns: on a
    terminal, for people; never with ``--json``, nor on a pipe or in a file, whose lines are
    rows only, for ``grep``, ``awk`` and ``wc -l`` (docs/cli.md#output)."""
    if getattr(args, "json", False):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def line_width(stream: TextIO) -> int:
    """How many characters a line may take on ``stream``: the terminal's width (``COLUMNS``
    if set), or ``WIDTH`` on a pipe or in a file."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((80, 24)).columns if tty else WIDTH


LOG_HEADER = f"{'SEQ':>5}  {'AT':<29}  {'EVENT':<24} {'CONV':<8} {'TASK':<8}  BODY"
"""The line that names the columns of ``plait log`` on a terminal."""


def event_row(event: Event, style: Style = PLAIN) -> str:
    """Return one row of ``plait log``: seq, time, type, conversation, task, body."""
    fields = msgspec.to_builtins(event.body)
    fields.pop("type", None)
    body = cut(json_line(fields).rstrip()) if fields else ""
    at = event.at.isoformat(timespec="milliseconds")
    where = f"{(event.conversation_id or '-')[:8]:<8} {(event.task_id or '-')[:8]:<8}"
    kind = f"{type(event.body).__name__:<24}"
    where = where if body else where.rstrip()  # a row ends with what it shows
    if style.enabled:
        kind = _kind_style(event, style)(kind)
        at, where = style.dim(at), style.dim(where)
    return f"{event.seq:>5}  {at}  {kind} {where}  {body}".rstrip()


def _kind_style(event: Event, style: Style) -> Callable[[str], str]:
    """How ``plait log`` paints an event's type: failures red, aborts yellow, tasks bold."""
    body = event.body
    if isinstance(body, McpServerFailed | ModelRequestFailed):
        return style.red
    if isinstance(body, TurnAborted):
        return style.red if body.reason in ("crashed", "failed") else style.yellow
    if isinstance(body, ToolCallCompleted):
        return style.green if body.outcome == "ok" else style.red
    if isinstance(body, ToolCallRequested):
        return style.cyan
    if isinstance(body, TaskCompleted | SessionStarted | SessionClosed | ConversationOpened):
        return style.bold
    return str


AUDIT_HEADER = (
    f"{'SEQ':<8}  {'TOOL':<28} {'OUTCOME':<8} {'APPROVAL':<20} {'DURATION':>11}  {'OUTPUT':>9}  "
    f"{'SERVER':<10} CONVERSATION"
)
"""The line that names the columns of ``plait audit`` on a terminal. ``-`` in a row: no
approval was needed, no duration was measured (the call never ran), no output, no MCP server
(a built-in or function tool)."""


def audit_row(row: Any, style: Style = PLAIN) -> str:
    """Return one row of ``plait audit`` (a ``plait.replay.AuditRow``)."""
    took = f"{row.duration_ms:8.1f} ms" if row.duration_ms is not None else "       - ms"
    size = f"{row.output_size} B" if row.output_size is not None else "-"
    approval = "-" if row.approval == "not required" else row.approval
    if row.decided_by is not None:
        approval += f" by {row.decided_by}"
    if approval.startswith("denied"):
        approval = style.yellow(f"{approval:<20}")
    return (
        f"{style.dim(f'seq {row.seq:4}')}  {style.bold(f'{row.tool:<28}')} "
        f"{style.outcome(f'{row.outcome:<8}', row.outcome)} {approval:<20} {took}  {size:>9}  "
        f"{row.server or '-':<10} {style.dim('conversation ' + (row.conversation_id or '')[:8])}"
    )


_STATS = (
    "TASKS",
    "TURNS",
    "TOKENS IN",
    "TOKENS OUT",
    "CONTEXT",
    "ESTIMATED",
    "TOOL CALLS",
    "TOOL ERRORS",
    "MCP CALLS",
    "MCP MEAN MS",
    "MCP MAX MS",
    "CANCELLED",
    "FAILED",
    "MODEL ERRORS",
    "CUT OFF",
    "RETRIES",
)
STATS_HEADER = "  ".join(["CONV    ", *_STATS])
"""The line that names the columns of ``plait stats`` on a terminal."""


def stats_row(stats: Any, style: Style = PLAIN) -> str:
    """Return one row of ``plait stats`` (a ``ConversationStats``), a figure under each
    column of ``STATS_HEADER``: estimated counts the responses whose tokens plait counted
    itself (the server sent no usage); failed counts the turns that failed."""
    usage = stats.usage
    figures = (
        stats.tasks,
        stats.turns,
        usage.prompt_tokens,
        usage.completion_tokens,
        stats.context_tokens,
        stats.estimated,
        stats.tool_calls,
        stats.tool_failures,
        stats.mcp_calls,
        f"{stats.mcp_ms_mean:.1f}",
        f"{stats.mcp_ms_max:.1f}",
        stats.cancellations,
        stats.failures,
        stats.model_errors,
        stats.cut_off,
        stats.model_retries,
    )
    cells = [str(figure).rjust(len(name)) for figure, name in zip(figures, _STATS, strict=True)]
    for bad in (7, 12):  # tool errors, failed turns
        if figures[bad]:
            cells[bad] = style.red(cells[bad])
    return "  ".join([style.cyan(f"{stats.conversation_id[:8]:<8}"), *cells])
