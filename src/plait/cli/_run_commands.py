"""The commands that run tasks: ``exec``, ``chat``, ``compact``, ``recover`` and ``demo``.

Each needs a model (``demo`` brings its own, offline) and so a runtime; the runtime, openai and
mcp are imported inside the commands, so that the other commands start quickly.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from plait._config import Config
from plait._errors import McpError, PlaitError, SessionFailedError
from plait.cli import _output as render
from plait.cli._common import (
    config_of,
    err,
    existing_store,
    find_conversation,
    find_session,
    make_runtime,
    model_settings,
    out,
    signer_of,
    store_of,
    telemetry_of,
)
from plait.cli._compacting import report_compaction
from plait.cli._inputs import read_prompt
from plait.cli._instructions import session_instructions
from plait.cli._plan_view import tool_prefs
from plait.cli._spinner import Spinner
from plait.cli._stopping import Signals, Stopped, end_line, stop_runtimes
from plait.cli._style import Style
from plait.cli._verbose import ServerReport, server_report, watch_servers
from plait.cli._words import count

if TYPE_CHECKING:
    from collections.abc import Callable

    from plait.events import Event, Transient
    from plait.runtime import Runtime, SessionHandle, TaskOutcome

__all__ = [
    "cmd_chat",
    "cmd_compact",
    "cmd_demo",
    "cmd_exec",
    "cmd_mcp_server",
    "cmd_recover",
    "cmd_resume",
]

SIGINT_CODE = 130
"""The exit code of a command stopped by SIGINT (Ctrl-C)."""

SERVER_MARGIN_SEC = 30.0
"""Seconds waited for MCP servers past their ``startup_timeout_sec`` (by which they report)."""


def cmd_exec(args: argparse.Namespace) -> int:
    """Run one task to its end, streaming the answer (``plait exec``)."""
    # Before anything else: a signal while it starts stops it before its first lease. Only
    # its waits are cut where they are: taking, releasing a lease, closing are never cut.
    with Signals(raising=False) as signals:
        return _exec(args, signals)


def _exec(args: argparse.Namespace, signals: Signals) -> int:
    config = config_of(args)
    _take_last(args, config)
    with signals.interruptible():  # stdin may never end
        prompt = read_prompt(args.prompt)  # UTF-8, or one line saying where it is not
    if args.conversation and not args.session:
        raise PlaitError("--conversation needs --session: a new session has only its root")
    model = model_settings(config)
    with store_of(config, create=args.session is None) as store:
        session_id = find_session(store, args.session) if args.session else None
        conversation = None
        if session_id is not None and args.conversation:
            from plait.events.projections import HistoryProjection

            histories = HistoryProjection().fold(store.read(session_id))
            conversation = find_conversation(histories.conversations, session_id, args.conversation)
        signals.check()  # before the runtime's imports (openai: a second or more)
        runtime = make_runtime(config, model, store)
        handle, printer = None, None
        try:
            before = store.last_seq(session_id) if session_id else 0
            prefs = tool_prefs(args)
            signals.check()
            since = datetime.now(UTC)
            handle = (
                runtime.resume(session_id)
                if session_id
                else runtime.start_session(
                    tool_prefs=prefs, user_instructions=session_instructions()
                )
            )
            verb = "resumed" if session_id else "started"
            if handle.followed:  # another process runs it: the task goes to its inbox
                lease = store.leases.get(handle.session_id)
                verb = f"followed (run by {lease.owner if lease else 'another process'})"
            err(f"session {handle.session_id} {verb} (model {config.model.model})")
            signals.check()
            if config.policy.approval != "never":
                err(
                    f"policy.approval is {config.policy.approval!r}: plait exec has nobody to "
                    "ask, so the calls it asks for are denied (plait chat asks you)"
                )
            cid = conversation or handle.root_conversation_id
            printer = render.ExecPrinter(
                cid,
                sys.stdout,
                sys.stderr,
                json=args.json,
                style=Style.for_args(args, sys.stderr),
                spinner=Spinner.for_stream(sys.stderr),
            )
            from plait.runtime import Unrecorded

            shown = Unrecorded(cid)  # what the log did not take, if the session fails
            try:
                with signals.interruptible():
                    if not handle.followed:  # the owner runs the servers, and waits for them
                        report = server_report(config, since)
                        _await_servers(handle, config, printer, before, report)
                    outcome = _run(handle, prompt, cid, shown.then(printer), printer)
            except SessionFailedError:
                printer.end_line()
                if shown.text and not args.json:
                    out("[the answer above was not recorded: the session failed]")
                raise
            finally:
                printer.spinner.close()
            printer.end_line()
            # What others sent to the session meanwhile runs to its end here, or is handed
            # back for them (docs/processes.md); a signal hands it back, cutting its task.
            with signals.interruptible():
                handle.release()
        except Stopped as stopped:
            if printer is not None:
                end_line(printer.end_line, stopped)
            if handle is not None and handle.followed:
                if stopped.code == SIGINT_CODE:
                    handle.interrupt()  # the owner's task: Ctrl-C means it
                went = "interrupted there" if stopped.code == SIGINT_CODE else "goes on there"
                stopped.line += (
                    f": session {handle.session_id} is run by another process, its task {went}"
                )
            else:
                stopped.line = stop_runtimes([runtime], args.grace_sec, stopped)
            raise
        finally:
            runtime.close()
    if args.json:
        fields = msgspec.to_builtins(outcome)
        out(render.json_line({"type": "TaskOutcome", "session_id": handle.session_id, **fields}))
    if not outcome.ok:
        raise PlaitError(render.failure_line(outcome, config.model.api_key_env))
    return 0


def _run(
    handle: SessionHandle,
    prompt: str,
    cid: str,
    on_item: Callable[[Event | Transient], object],
    printer: render.ExecPrinter,
) -> TaskOutcome:
    """Submit ``prompt`` to conversation ``cid`` and wait until its task and its
    continuations end, handing ``on_item`` every item of the session meanwhile; ``printer``
    shows only that task's (docs/processes.md#following-from-the-command-line)."""
    from plait.runtime import await_outcome

    with handle.subscribe() as feed:  # before the submit: nothing of the task is missed
        task_id = handle.submit(prompt, conversation_id=cid)
        printer.follow(task_id)
        return await_outcome(feed, task_id, None, on_item=on_item)


def cmd_resume(args: argparse.Namespace) -> int:
    """Go on with a stored session in chat (``plait resume``)."""
    if (args.session is None) == (not args.last):
        raise PlaitError(
            "plait resume takes a SESSION (see `plait sessions`) or --last: one of them"
        )
    return cmd_chat(args)


def cmd_chat(args: argparse.Namespace) -> int:
    """Talk with a session on the terminal, one task per line (``plait chat``)."""
    from pathlib import Path

    from plait.cli._chat import TerminalApprover, chat
    from plait.cli._chat_commands import ChatCommands

    config = config_of(args)
    _take_last(args, config)
    model = model_settings(config)
    approver = TerminalApprover()
    with store_of(config, create=args.session is None) as store:
        session_id = find_session(store, args.session) if args.session else None
        before, since = store.last_seq(session_id) if session_id else 0, datetime.now(UTC)

        def runtime_of(name: str | None) -> Runtime:
            settings = model if name is None else msgspec.structs.replace(model, model=name)
            return make_runtime(config, settings, store, approver)

        commands = ChatCommands(args, store, config.store.url, runtime_of, session_id, Path.cwd())
        watch_servers(commands.session, config, since, before)
        try:
            with Signals([signal.SIGTERM]):  # Ctrl-C is the chat's own: it interrupts a task
                return chat(commands, sys.stdin, sys.stdout, sys.stderr, approver)
        except Stopped as stopped:
            sys.stdout.write("\n")  # the line the reply was on ends
            stopped.line = stop_runtimes([commands.runtime], args.grace_sec, stopped)
            raise
        finally:
            commands.close()


def _take_last(args: argparse.Namespace, config: Config) -> None:
    """With ``--last``, make ``args.session`` the session of the store that was active last
    (its last event the latest of all)."""
    if not getattr(args, "last", False):
        return
    if args.session:
        raise PlaitError("--last and --session each name a session: give one of them")
    from plait.cli._listing import by_activity

    with store_of(config, create=False) as store:
        ranked = by_activity(store)
    if not ranked:
        raise PlaitError(f"{config.store.url}: no session to go on with (drop --last)")
    args.session = ranked[0][0].stream


def cmd_mcp_server(args: argparse.Namespace) -> int:
    """Serve plait as an MCP server, over stdio or streamable HTTP (``plait mcp-server``)."""
    from plait.cli._mcp_server import serve  # imports mcp: only this command pays for it

    return serve(args)


def cmd_compact(args: argparse.Namespace) -> int:
    """Summarise a conversation's older history with the model (``plait compact``)."""
    config = config_of(args)
    model = model_settings(config)
    with store_of(config, create=False) as store:
        session_id = find_session(store, args.session)
        before = store.last_seq(session_id)
        runtime = make_runtime(config, model, store)
        try:
            handle = runtime.resume(session_id)
            cid = handle.root_conversation_id
            if args.conversation:
                ids = [info.id for info in handle.conversations()]
                cid = find_conversation(ids, session_id, args.conversation)
            outcome = handle.compact(cid)
        finally:
            runtime.close()
        report_compaction(
            store, session_id, cid, before, outcome, sys.stdout, sys.stderr, args.json
        )
    return 0


def _await_servers(
    handle: SessionHandle,
    config: Config,
    printer: render.ExecPrinter,
    before: int,
    report: ServerReport | None,
) -> None:
    """Print what the session recorded after seq ``before``, and wait until every MCP server
    it starts now (not those whose tools its log lists) is ready or failed for good, showing
    ``report`` (``-v``'s) each event. A failed one is one warning line, and the task runs
    without its tools; unless it is ``required``: then it is an ``McpError``
    (docs/tools.md#servers)."""
    from plait.events import Event, McpServerFailed, McpServerReady

    later = handle.later_servers
    waiting = {name for name, s in config.mcp_servers.items() if s.enabled} - later
    if report is not None:
        report.later(later)
    limit = SERVER_MARGIN_SEC + max(
        (config.mcp_servers[name].startup_timeout_sec for name in waiting), default=0
    )
    deadline = time.monotonic() + limit
    with handle.subscribe(transient=False) as feed:
        # Subscribed, then read: an event recorded in between is in one or both, never lost.
        seen: list[Event] = handle.runtime.store.read(handle.session_id, after=before)
        while True:
            for event in seen:
                if report is not None:
                    report.tell(event)
                body = event.body
                if isinstance(body, McpServerFailed) and body.retry_in_sec is None:
                    printer.spinner.clear()
                    _server_failed(body.server, body.reason, config)
                    waiting.discard(body.server)
                    if not printer.json:  # the warning says it: not twice
                        printer.last_seq = max(printer.last_seq, event.seq)
                        continue
                printer(event)
                if isinstance(body, McpServerReady):
                    waiting.discard(body.server)
            if not waiting:
                printer.waiting(None)
                return
            printer.waiting(f"starting MCP servers: {', '.join(sorted(waiting))}")
            item = feed.get(timeout=max(deadline - time.monotonic(), 0))
            if item is None:
                names = ", ".join(sorted(waiting))
                raise McpError(f"MCP servers not ready after {limit:g} s: {names}")
            seen = [item] if isinstance(item, Event) else []


def _server_failed(server: str, reason: str, config: Config) -> None:
    """Say once, on one line, that ``server`` did not start; stop if it is required."""
    why = " ".join(reason.split())  # a stderr tail has lines of its own
    settings = config.mcp_servers.get(server)
    if settings is not None and settings.required:
        raise McpError(f"MCP server {server!r} did not start: {why}")
    err(f"plait: warning: MCP server {server!r} did not start, going on without its tools: {why}")


def cmd_recover(args: argparse.Namespace) -> int:
    """Resume every session a stopped process left running or waiting (``plait recover``)."""
    from plait.runtime import in_flight

    config = config_of(args)
    with store_of(config, create=False) as store:
        flight = [session_id for session_id, _, _ in in_flight(store)]
        if not flight:
            err("nothing to recover: no session was left with a task running or waiting")
            return 0
        runtime = make_runtime(config, model_settings(config), store)
        try:
            found = runtime.recover()
            for recovery in found:
                if args.json:
                    out(render.json_line({**msgspec.to_builtins(recovery), "left": False}))
                else:
                    out(render.recovery_row(recovery))
            left = _left(runtime, [s for s in flight if s not in {r.session_id for r in found}])
            for fields in left:
                out(render.json_line(fields) if args.json else render.left_row(fields))
            sys.stdout.flush()
            resumed = [r for r in found if not r.not_resumed]
            if any(r.waiting for r in resumed):
                err("running the tasks that were waiting...")
            for recovery in resumed:
                _await_idle(runtime.resume(recovery.session_id))
        finally:
            runtime.close()
    err(
        f"recovered {count(len(found), 'session')}"
        + (f", left {len(left)} to their owners" if left else "")
    )
    return 0


def _left(runtime: Runtime, sessions: list[str]) -> list[dict[str, Any]]:
    """The ``plait recover --json`` rows of ``sessions``, in flight and not recovered: those
    another process owns (one finished meanwhile, its lease free, is not one)."""
    from plait.runtime import owner_state

    rows = []
    for session_id in sessions:
        lease = runtime.store.leases.get(session_id)
        if lease is not None and lease.owner is not None and lease.owner != runtime.owner.id:
            rows.append(render.left_fields(session_id, lease, owner_state(lease.owner)))
    return rows


def _await_idle(handle: SessionHandle) -> None:
    """Wait until the session has no task running or waiting."""
    from plait.events import Event
    from plait.events.projections import TaskQueueProjection

    tasks = TaskQueueProjection()
    with handle.subscribe(transient=False) as feed:
        state, last = tasks.initial(), 0
        for event in handle.runtime.store.read(handle.session_id):
            tasks.apply(state, event)
            last = event.seq
        while state.running is not None or state.pending:
            item = feed.get()
            if item is None:
                return  # the session was closed
            if isinstance(item, Event) and item.seq > last:  # not one the read had
                tasks.apply(state, item)
                last = item.seq


def cmd_demo(args: argparse.Namespace) -> int:
    """Run a session offline, then show what its log holds and replay it (``plait demo``)."""
    from plait.cli._demo import replay_check, run_demo

    config = config_of(args)
    telemetry = telemetry_of(config)
    session, outcome = run_demo(
        config.store.url, sys.stdout, sys.stderr, signer_of(config), telemetry
    )
    with existing_store(args) as store:
        render.show_session(store.read(session), store.verify(session), sys.stdout)
    replayed = replay_check(config.store.url, session, sys.stdout)
    err(f"\nstored in {config.store.url}; try: plait log {session[:8]}")
    return 0 if outcome.ok and replayed else 1
