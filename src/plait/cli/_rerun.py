"""``plait replay --live``: recorded sessions run again against the model configured now, and
what changed, for people and for CI (docs/replay.md#live-reruns)."""

from __future__ import annotations

import argparse
import sys
import threading
from datetime import datetime

import msgspec

from plait._errors import ConfigError
from plait.cli import _output as render
from plait.cli._common import config_of, err, existing_store, find_session, model_settings, out
from plait.cli._instructions import session_instructions
from plait.events import EventStore, SessionStarted
from plait.replay import FailOn, RerunReport, TaskReport

__all__ = ["cmd_rerun"]


def _sessions(store: EventStore, args: argparse.Namespace) -> list[str]:
    """The sessions to rerun: those named, or with ``--all`` every session that is not itself
    a rerun, started since ``--since``, the ``--limit`` newest."""
    if args.session:
        return [find_session(store, s) for s in args.session]
    if not args.all:
        raise ConfigError("plait replay --live: name a session, or give --all")
    found: list[tuple[datetime, str]] = []
    for info in store.streams():
        first = store.read(info.stream, upto=1)
        body = first[0].body if first else None
        if not isinstance(body, SessionStarted) or (body.forked_from and body.forked_from.rerun):
            continue
        if args.since is None or first[0].at >= args.since:
            found.append((first[0].at, info.stream))
    found.sort(reverse=True)
    return [stream for _, stream in found[: args.limit]]


def cmd_rerun(args: argparse.Namespace) -> int:
    """Run recorded sessions again against the model configured now; say what changed."""
    from plait.replay import rerun_each

    config = config_of(args)
    model = model_settings(config)
    with existing_store(args) as store:
        sessions = _sessions(store, args)
        progress = _Progress(len(sessions))
        results = rerun_each(
            store,
            sessions,
            concurrency=args.concurrency,
            on_done=lambda _: progress.done(),
            model=model,
            mcp_servers=config.mcp_servers,
            live_tools=args.tools == "live",
            save=not args.no_save,
            timeout=args.timeout,
            user_instructions=session_instructions(),  # AGENTS.md and the rest, as now
        )
        progress.close()
    reports = {s: r for s, r in results.items() if isinstance(r, RerunReport)}
    failed = {s: str(r) for s, r in results.items() if not isinstance(r, RerunReport)}
    for session in sessions:
        if session in failed:
            _failed(session, failed[session], args.json)
        else:
            _show(reports[session], args)
    if len(sessions) > 1 and not args.json:
        _summary(sessions, reports, failed, args.fail_on)
    if failed:
        return 2
    return 1 if any(r.differs(args.fail_on) for r in reports.values()) else 0


class _Progress:
    """``3 of 20 sessions rerun`` on a terminal's stderr, rewritten as they end."""

    def __init__(self, total: int) -> None:
        self.total, self.count = total, 0
        self.shown = total > 1 and sys.stderr.isatty()
        self._lock = threading.Lock()

    def done(self) -> None:
        with self._lock:
            self.count += 1
            if self.shown:
                sys.stderr.write(f"\r{self.count} of {self.total} sessions rerun")
                sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _failed(session: str, why: str, as_json: bool) -> None:
    if as_json:
        out(render.json_line({"session_id": session, "error": why}))
    else:
        err(f"plait: session {session}: not rerun: {why}")


def _show(report: RerunReport, args: argparse.Namespace) -> None:
    if args.json:
        data = msgspec.to_builtins(report)
        data["differs"] = report.differs(args.fail_on)
        out(render.json_line(data))
        return
    kept = f" as {report.rerun_session_id[:8]}" if report.rerun_session_id else " (not kept)"
    out(f"session {report.session_id[:8]} rerun{kept} against {report.model}"
        f" at {report.base_url or 'the default endpoint'}")  # fmt: skip
    for task in report.tasks:
        for line in _task_lines(task):
            out(line)
    differing = [t for t in report.tasks if t.differs(args.fail_on)]
    verdict = "no difference" if not differing else f"{len(differing)} differ ({args.fail_on})"
    out(f"result: {len(report.tasks)} tasks, {verdict}")


def _short(text: str | None, width: int = 70) -> str:
    if text is None:
        return "(no answer)"
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _calls(count: int) -> str:
    return f"{count} call" if count == 1 else f"{count} calls"


def _task_lines(task: TaskReport) -> list[str]:
    head = f"task {task.index} {_short(task.prompt, 40)!r}:"
    if task.error is not None:
        return [f"{head} not rerun: {task.error}"]
    answer = "same answer" if task.same_answer else f"answer differs ({task.similarity:.2f} alike)"
    calls = "same tool calls" if task.same_tools else "tool calls differ"
    lines = [
        f"{head} {answer}, {calls}; {_calls(task.from_log)} from the log, "
        f"{task.not_recorded} not recorded; tokens {task.recorded_tokens} -> {task.rerun_tokens}; "
        f"{task.recorded_ms:.0f} -> {task.rerun_ms:.0f} ms"
    ]
    if not task.same_answer:
        lines += [
            f"  recorded: {_short(task.recorded_answer)}",
            f"  rerun:    {_short(task.rerun_answer)}",
        ]
        lines += [f"    {line}" for line in task.diff[2:]]  # past the ---/+++ header
    for call in task.added:
        lines.append(f"  added:   {call.tool}({call.arguments})")
    for call in task.removed:
        lines.append(f"  removed: {call.tool}({call.arguments})")
    for change in task.changed:
        lines.append(f"  changed: {change.tool}({change.recorded}) -> ({change.rerun})")
    if task.divergence is not None:
        lines.append(f"  first divergence: {task.divergence}")
    if task.status != "completed":
        lines.append(f"  the rerun's task ended {task.status}")
    return lines


def _summary(
    sessions: list[str], reports: dict[str, RerunReport], failed: dict[str, str], fail_on: FailOn
) -> None:
    out("")
    out(f"{'session':<10} {'tasks':>5} {'differ':>6}  result")
    for session in sessions:
        report = reports.get(session)
        if report is None:
            out(f"{session[:8]:<10} {'-':>5} {'-':>6}  error: {_short(failed[session], 50)}")
            continue
        differing = sum(t.differs(fail_on) for t in report.tasks)
        result = "differs" if differing else "same"
        out(f"{session[:8]:<10} {len(report.tasks):>5} {differing:>6}  {result}")
