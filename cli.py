"""The ``plait`` command.

Results go to stdout, progress and errors to stderr (``plait.cli_output`` says how each is
printed). Every command reads the configuration: ``plait.toml``, ``mcp.json``, the
environment, then the flags (``plait.config``). An error a user can cause is one line,
``plait: ...``, and exit code 1; a traceback only with ``--debug``. Heavy imports (openai,
mcp) happen inside the commands that need them.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from plait import cli_output as render
from plait.config import Config, load_config
from plait.errors import ConfigError, McpError, PlaitError, StoreError

if TYPE_CHECKING:
    from plait.actors.approvals import Approver
    from plait.actors.model import ModelSettings
    from plait.events.store import EventStore
    from plait.events.types import Event
    from plait.runtime import Runtime, SessionHandle

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
"""Model servers on this machine: they take any API key, so none has to be set."""

SERVER_MARGIN_SEC = 30.0
"""Seconds waited for MCP servers past their ``startup_timeout_sec`` (by which they report)."""


# --- the configuration, the store, the runtime -----------------------------------------------


def _config(args: argparse.Namespace) -> Config:
    flags = {name: getattr(args, name, None) for name in MODEL_FLAGS}
    return load_config(
        args.config,
        store=args.store,
        model=getattr(args, "model", None),
        model_flags={name: value for name, value in flags.items() if value is not None},
    )


def _open(args: argparse.Namespace) -> EventStore:
    """Open the configured store, which must exist: reading never creates one."""
    return _open_store(_config(args), create=False)


def _open_store(config: Config, *, create: bool) -> EventStore:
    url = config.store.url
    if url.startswith(("postgresql://", "postgres://")) or url == "memory:":
        from plait.events.stores import open_store

        return open_store(url)
    path = url.removeprefix("sqlite://")
    if "://" in path:
        raise ConfigError(f"{url}: unknown store URL (a SQLite path, or postgresql://...)")
    if not create and not Path(path).exists():
        raise PlaitError(f"{url}: no store here (run `plait exec` first, or pass --store)")
    from plait.events.stores.sqlite import SqliteStore

    return SqliteStore(path, busy_timeout_sec=config.store.busy_timeout_sec)


def _session(store: EventStore, session: str) -> str:
    """Return the one session id that starts with ``session``."""
    matches = [info.stream for info in store.streams() if info.stream.startswith(session)]
    if len(matches) != 1:
        what = "no session" if not matches else f"{len(matches)} sessions"
        raise PlaitError(f"{what} in the store match {session!r} (see `plait sessions`)")
    return matches[0]


def _conversation(ids: Iterable[str], session: str, conversation: str) -> str:
    """Return the one conversation id of ``session`` (among ``ids``) that starts with
    ``conversation``."""
    matches = [c for c in ids if c.startswith(conversation)]
    if len(matches) != 1:
        what = "no conversation" if not matches else f"{len(matches)} conversations"
        raise PlaitError(
            f"session {session}: {what} match {conversation!r} "
            f"(see `plait conversations {session[:8]}`)"
        )
    return matches[0]


def _model_settings(config: Config) -> ModelSettings:
    """The model server as configured, checked before anything runs: a missing key is an
    error unless the server is local."""
    from plait.actors.model import ModelSettings

    model, key = config.model, config.api_key
    if key is None:
        if urlsplit(model.base_url or "").hostname not in LOCAL_HOSTS:
            where = model.base_url or "OpenAI's (model.base_url and OPENAI_BASE_URL are unset)"
            raise ConfigError(
                f"no API key for the model server at {where}: set {model.api_key_env}"
            )
        key = "local"  # the SDK wants a key; a local server takes any
    fields = msgspec.structs.asdict(model)
    del fields["api_key_env"]  # where the key came from; the settings hold the key
    return ModelSettings(api_key=key, **fields)


def _runtime(
    config: Config, model: ModelSettings, store: EventStore, approver: Approver | None = None
) -> Runtime:
    """A runtime on ``store``, configured as ``config`` says; ``approver`` decides the tool
    calls its approval policy asks for (none: they are denied)."""
    from plait.actors.pool import McpLimits
    from plait.events.values import HistorySettings, StoragePolicy
    from plait.runtime import Runtime

    policy, history = config.policy, config.history
    limits = McpLimits(
        policy.max_concurrent_tool_calls, policy.max_concurrent_tool_calls_per_conversation
    )
    return Runtime(
        store,
        model=model,
        max_interrupt_chain_depth=policy.max_interrupt_chain_depth,
        mcp_servers=config.mcp_servers,
        mcp_limits=limits,
        storage_policy=StoragePolicy.parse(policy.storage),
        approval_policy=policy.approval,
        approver=approver,
        approval_timeout_sec=policy.approval_timeout_sec,
        history=HistorySettings(
            model.context_window,
            history.compact_threshold,
            history.keep_recent_tokens,
            history.max_items,
            history.max_tokens,
        ),
    )


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- running tasks ---------------------------------------------------------------------------


def cmd_exec(args: argparse.Namespace) -> int:
    """Run one task to its end, streaming the answer; exit 1 if it does not complete."""
    config = _config(args)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if args.conversation and not args.session:
        raise PlaitError("--conversation needs --session: a new session has only its root")
    model = _model_settings(config)
    with _open_store(config, create=args.session is None) as store:
        session_id = _session(store, args.session) if args.session else None
        conversation = None
        if session_id is not None and args.conversation:
            from plait.events.projections import HistoryProjection

            histories = HistoryProjection().fold(store.read(session_id))
            conversation = _conversation(histories.conversations, session_id, args.conversation)
        runtime = _runtime(config, model, store)
        try:
            before = store.last_seq(session_id) if session_id else 0
            handle = runtime.resume(session_id) if session_id else runtime.start_session()
            verb = "resumed" if session_id else "started"
            _err(f"session {handle.session_id} {verb} (model {config.model.model})")
            if config.policy.approval != "never":
                _err(
                    f"policy.approval is {config.policy.approval!r}: plait exec has nobody to "
                    "ask, so the calls it asks for are denied (plait chat asks you)"
                )
            cid = conversation or handle.root_conversation_id
            printer = render.ExecPrinter(cid, sys.stdout, sys.stderr, json=args.json)
            _await_servers(handle, config, printer, before)
            outcome = handle.run(prompt, conversation_id=cid, on_item=printer)
            printer.end_line()
        finally:
            runtime.close()
    if args.json:
        fields = msgspec.to_builtins(outcome)
        _out(render.json_line({"type": "TaskOutcome", "session_id": handle.session_id, **fields}))
    if not outcome.ok:
        raise PlaitError(render.failure_line(outcome, config.model.api_key_env))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """Talk with a session on the terminal, one task per line; Ctrl-C interrupts the running
    task, a second Ctrl-C or Ctrl-D leaves."""
    from plait.chat import TerminalApprover, chat

    config = _config(args)
    model = _model_settings(config)
    approver = TerminalApprover()
    with _open_store(config, create=args.session is None) as store:
        session_id = _session(store, args.session) if args.session else None
        runtime = _runtime(config, model, store, approver)
        try:
            handle = runtime.resume(session_id) if session_id else runtime.start_session()
            return chat(handle, sys.stdin, sys.stdout, sys.stderr, approver)
        finally:
            runtime.close()


def cmd_compact(args: argparse.Namespace) -> int:
    """Summarise a conversation's older history with the model, keeping the latest messages."""
    from plait.events.types import HistoryCompacted

    config = _config(args)
    model = _model_settings(config)
    with _open_store(config, create=False) as store:
        session_id = _session(store, args.session)
        before = store.last_seq(session_id)
        runtime = _runtime(config, model, store)
        try:
            handle = runtime.resume(session_id)
            cid = handle.root_conversation_id
            if args.conversation:
                ids = [info.id for info in handle.conversations()]
                cid = _conversation(ids, session_id, args.conversation)
            outcome = handle.compact(cid)
        finally:
            runtime.close()
        done = [e for e in store.read(session_id, after=before) if e.conversation_id == cid]
    if not outcome.ok:
        raise PlaitError(f"compaction of conversation {cid} {outcome.status}: {outcome.detail}")
    compacted = next((e.body for e in done if isinstance(e.body, HistoryCompacted)), None)
    if compacted is None:
        _err(f"conversation {cid}: nothing to compact (its history is already short)")
        return 0
    row = {"conversation_id": cid, **msgspec.structs.asdict(compacted)}
    _out(render.json_line(row) if args.json else render.compaction_row(cid, compacted))
    return 0


def _await_servers(
    handle: SessionHandle, config: Config, printer: render.ExecPrinter, before: int
) -> None:
    """Print what the session recorded after seq ``before``, and wait until every MCP server
    is ready: one that failed for good is an ``McpError``, not a turn without its tools."""
    from plait.events.types import Event, McpServerFailed, McpServerReady

    waiting = {name for name, server in config.mcp_servers.items() if server.enabled}
    limit = SERVER_MARGIN_SEC + max(
        (config.mcp_servers[name].startup_timeout_sec for name in waiting), default=0
    )
    deadline = time.monotonic() + limit
    with handle.subscribe(transient=False) as feed:
        # Subscribed, then read: an event recorded in between is in one or both, never lost.
        seen: list[Event] = handle.runtime.store.read(handle.session_id, after=before)
        while True:
            for event in seen:
                printer(event)
                body = event.body
                if isinstance(body, McpServerReady):
                    waiting.discard(body.server)
                elif isinstance(body, McpServerFailed) and body.retry_in_sec is None:
                    raise McpError(f"MCP server {body.server!r} did not start: {body.reason}")
            if not waiting:
                return
            item = feed.get(timeout=max(deadline - time.monotonic(), 0))
            if item is None:
                names = ", ".join(sorted(waiting))
                raise McpError(f"MCP servers not ready after {limit:g} s: {names}")
            seen = [item] if isinstance(item, Event) else []


def cmd_recover(args: argparse.Namespace) -> int:
    """Resume every session a stopped process left with a task running or waiting, and run
    its waiting tasks; only while no other process uses the store."""
    from plait.runtime import in_flight

    config = _config(args)
    with _open_store(config, create=False) as store:
        if next(in_flight(store), None) is None:
            _err("nothing to recover: no session was left with a task running or waiting")
            return 0
        runtime = _runtime(config, _model_settings(config), store)
        try:
            found = runtime.recover()
            for recovery in found:
                _out(render.json_line(recovery) if args.json else render.recovery_row(recovery))
            sys.stdout.flush()
            resumed = [r for r in found if not r.not_resumed]
            if any(r.waiting for r in resumed):
                _err("running the tasks that were waiting...")
            for recovery in resumed:
                _await_idle(runtime.resume(recovery.session_id))
        finally:
            runtime.close()
    _err(f"recovered {len(found)} sessions")
    return 0


def _await_idle(handle: SessionHandle) -> None:
    """Wait until the session has no task running or waiting."""
    from plait.actors.scheduler import SchedulerState, evolve
    from plait.events.types import Event

    with handle.subscribe(transient=False) as feed:
        state, last = SchedulerState(), 0
        for event in handle.runtime.store.read(handle.session_id):
            evolve(state, event)
            last = event.seq
        while state.running is not None or state.pending:
            item = feed.get()
            if item is None:
                return  # the session was closed
            if isinstance(item, Event) and item.seq > last:  # not one the read had
                evolve(state, item)
                last = item.seq


def cmd_demo(args: argparse.Namespace) -> int:
    """Run a session offline (a scripted model, a bundled MCP server), then show what its log
    holds and replay it."""
    from plait.demo import replay_check, run_demo

    url = _config(args).store.url
    session, outcome = run_demo(url, sys.stdout, sys.stderr)
    with _open(args) as store:
        render.show_session(store.read(session), store.verify(session), sys.stdout)
    replayed = replay_check(url, session, sys.stdout)
    _err(f"\nstored in {url}; try: plait log {session[:8]}")
    return 0 if outcome.ok and replayed else 1


# --- reading the log -------------------------------------------------------------------------


def cmd_sessions(args: argparse.Namespace) -> int:
    """List the sessions in the store, oldest first."""
    with _open(args) as store:
        for info in store.streams():
            first = store.read(info.stream, limit=1)[0]
            last = store.read(info.stream, after=info.last_seq - 1)[0]
            fields = render.session_fields(info, first, last)
            _out(render.json_line(fields) if args.json else render.session_row(fields))
    return 0


def cmd_conversations(args: argparse.Namespace) -> int:
    """List a session's live conversations: who created each, messages, last activity."""
    from plait.events.projections import HistoryProjection, conversation_index

    with _open(args) as store:
        session = _session(store, args.session)
        histories = HistoryProjection().fold(store.read(session))
    for info in conversation_index(histories, session):
        _out(render.json_line(info) if args.json else render.conversation_row(info))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print a conversation's history as chat messages (the root's by default)."""
    from plait.events.projections import HistoryProjection
    from plait.events.types import SessionStarted
    from plait.events.values import as_text

    with _open(args) as store:
        session = _session(store, args.session)
        events = store.read(session)
    histories = HistoryProjection().fold(events)
    started = events[0].body
    root = started.root_conversation_id if isinstance(started, SessionStarted) else ""
    conversation = _conversation(histories.conversations, session, args.conversation or root)
    messages = histories.conversations[conversation].messages
    for message in messages[-args.limit :] if args.limit else messages:
        row = {"seq": message.seq, **message.to_openai()}
        if args.reasoning and message.reasoning is not None:
            row["reasoning"] = as_text(message.reasoning)
        _out(render.json_line(row) if args.json else render.message_row(row))
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    """Print every event of a session: seq, time, type, conversation, task, body."""
    row = render.event_json if args.json else render.event_row
    with _open(args) as store:
        session = _session(store, args.session)
        events = store.read(session)
        for event in events:
            _out(row(event))
        if not args.follow:
            return 0
        sys.stdout.flush()
        _err(f"following {session}; Ctrl-C to stop")
        try:
            with store.subscribe(events[-1].position) as feed:
                for event in feed:
                    if event.stream == session:
                        _out(row(event))
                        sys.stdout.flush()
        except KeyboardInterrupt:
            return 0  # how a follow ends
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Show a session's conversations, histories, audit and chain check."""
    with _open(args) as store:
        session = _session(store, args.session)
        render.show_session(store.read(session), store.verify(session), sys.stdout)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check a session's hash chain and blobs; exit 1 if anything was edited."""
    with _open(args) as store:
        report = store.verify(_session(store, args.session))
    if args.json:
        _out(render.json_line(report))
    elif report.ok:
        _out(f"ok: {report.events} events, {report.blobs} blobs ({report.redacted} redacted)")
    else:
        _out(f"tampered: seq {report.first_bad_seq}: {report.reason}")
    return 0 if report.ok else 1


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a session from its log, no network or key; exit 1 at the first difference."""
    from plait.replay import replay

    with _open(args) as store:
        session = _session(store, args.session)
        result = replay(store, session, max_interrupt_chain_depth=args.max_interrupt_chain_depth)
    if args.json:
        _out(render.json_line(result))
    elif result.divergence is None:
        _out(f"replayed {result.events} of {result.total} events: no difference")
    else:
        _out(f"diverged after {result.events} of {result.total} events:")
        _out(result.divergence.message())
    return 0 if result.ok else 1


def cmd_audit(args: argparse.Namespace) -> int:
    """List every tool call of a session: tool, server, outcome, size, duration."""
    from plait.replay import audit, audit_jsonl

    with _open(args) as store:
        session = _session(store, args.session)
        rows = audit(
            store, session, tool=args.tool, conversation_id=args.conversation, outcome=args.outcome
        )
    if args.json:
        sys.stdout.buffer.write(audit_jsonl(rows))
        return 0
    for row in rows:
        _out(render.audit_row(row))
    _err(f"{len(rows)} calls; {_model_errors(args, session)}")
    return 0


def _model_errors(args: argparse.Namespace, session: str) -> str:
    """How many of the session's turns the model server failed, by kind."""
    from plait.events.types import TurnAborted

    with _open(args) as store:
        kinds = [
            e.body.model_error
            for e in store.read(session, resolve_blobs=False)
            if isinstance(e.body, TurnAborted) and e.body.model_error is not None
        ]
    by_kind = ", ".join(f"{kind} {kinds.count(kind)}" for kind in sorted(set(kinds)))
    return f"{len(kinds)} model errors" + (f" ({by_kind})" if kinds else "")


def cmd_stats(args: argparse.Namespace) -> int:
    """Show what each conversation of a session did: tasks, turns, tokens, tool calls, MCP
    latency, cancellations, failures."""
    from plait.events.projections import StatsProjection

    with _open(args) as store:
        session = _session(store, args.session)
        stats = StatsProjection().fold(store.read(session, resolve_blobs=False))
    for conversation in stats.conversations.values():
        if args.json:
            fields = msgspec.to_builtins(conversation)
            _out(render.json_line({**fields, "mcp_ms_mean": conversation.mcp_ms_mean}))
        else:
            _out(render.stats_row(conversation))
    return 0


# --- changing the log ------------------------------------------------------------------------


def cmd_fork(args: argparse.Namespace) -> int:
    """Copy a session's events up to a seq into a new session; print the new session's id."""
    from plait.replay import fork

    with _open(args) as store:
        session = _session(store, args.session)
        new = fork(store, session, args.at)
    ids = {"session_id": new, "forked_from": session, "at_seq": args.at}
    _out(render.json_line(ids) if args.json else new)
    _err(f"forked {session} at seq {args.at}; go on with: plait exec --session {new[:8]} PROMPT")
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    """Delete the content of ``ttl`` conversations that is due; print how many blobs."""
    # What Runtime.expire_content does, without the model client a Runtime insists on.
    from plait.events.storage import Expiry

    with _open(args) as store:
        deleted = Expiry(store).sweep()
    _out(render.json_line({"deleted": deleted}) if args.json else f"deleted {deleted} blobs")
    return 0


# --- the parser ------------------------------------------------------------------------------

Command = Callable[[argparse.Namespace], int]
Parser = argparse.ArgumentParser
SESSION = "session id (a unique prefix is enough)"
MODEL = "the model name (default $PLAIT_MODEL, else [model] model)"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``plait`` command."""
    parser = argparse.ArgumentParser(
        prog="plait",
        description="Replayable, auditable, crash-safe LLM agent sessions.",
        epilog='example: plait exec "What changed since the last release?" && plait sessions',
    )
    _add_shared(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Command, *examples: str, json: str | None = None) -> Parser:
        doc = " ".join((fn.__doc__ or "").split()).replace("``", "`")
        cmd = sub.add_parser(
            name,
            help=doc.split(";")[0].rstrip("."),
            description=textwrap.fill(doc, 79),  # the epilog's examples keep their lines
            epilog="example: " + "\n         ".join(examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.set_defaults(func=fn)
        _add_shared(cmd, top=False)
        if json is not None:
            cmd.add_argument("--json", action="store_true", help=json)
        return cmd

    def reader(name: str, fn: Command, *examples: str, json: str = "JSON Lines") -> Parser:
        cmd = add(name, fn, *examples, json=json)
        cmd.add_argument("session", help=SESSION)
        return cmd

    run = add(
        "exec",
        cmd_exec,
        'plait exec "Summarise the open issues."',
        'plait exec --session 3f2a "And the closed ones?"',
        "plait exec --json - < prompt.txt | jq -c 'select(.body.type == \"ToolCallRequested\")'",
        json="stream JSON Lines: each event as `plait log --json` prints it, each text delta "
        'as {"type": "AgentMessageDelta", ...}, last {"type": "TaskOutcome", ...}',
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to do; - reads it from stdin")
    run.add_argument("--session", help="go on with this session (default: a new one)")
    run.add_argument("--conversation", help="run in this conversation of the --session")
    _add_model_flags(run)
    talk = add("chat", cmd_chat, "plait chat", "plait chat --session 3f2a")
    talk.add_argument("--session", help="go on with this session (default: a new one)")
    _add_model_flags(talk)
    compact = reader(
        "compact",
        cmd_compact,
        "plait compact 3f2a",
        "plait compact 3f2a --conversation 9c1d --json",
        json="the HistoryCompacted event as JSON",
    )
    compact.add_argument("--conversation", help="a conversation id or prefix (default: the root)")
    compact.add_argument("--model", help=MODEL)
    add("sessions", cmd_sessions, "plait sessions --json", json="JSON Lines")
    reader("conversations", cmd_conversations, "plait conversations 3f2a")
    history = reader("history", cmd_history, "plait history 3f2a --conversation 9c1d --limit 10")
    history.add_argument("--conversation", help="a conversation id or prefix (default: the root)")
    history.add_argument("--limit", type=_positive, metavar="N", help="only the last N messages")
    history.add_argument(
        "--reasoning", action="store_true", help="show the model's reasoning, where it sent any"
    )
    log = reader("log", cmd_log, "plait log 3f2a", "plait log 3f2a --follow --json")
    log.add_argument("--follow", action="store_true", help="go on printing events as they come")
    add("show", cmd_show, "plait show 3f2a").add_argument("session", help=SESSION)
    audit = reader("audit", cmd_audit, "plait audit 3f2a --outcome error")
    audit.add_argument("--tool", help="a tool name, or a server prefix such as git__")
    audit.add_argument("--conversation", help="a conversation id")
    outcomes = ["ok", "error", "timeout", "refused", "unknown", "cancelled", "aborted", "pending"]
    audit.add_argument("--outcome", choices=outcomes)
    reader("stats", cmd_stats, "plait stats 3f2a", "plait stats 3f2a --json")
    reader("verify", cmd_verify, "plait verify 3f2a", json="the report as JSON")
    replay = reader("replay", cmd_replay, "plait replay 3f2a", json="the result as JSON")
    replay.add_argument(
        "--max-interrupt-chain-depth",
        type=int,
        help="replay as if the program had this limit (default: as the session recorded)",
    )
    fork = reader("fork", cmd_fork, "plait fork 3f2a --at 41", json="the ids as JSON")
    fork.add_argument("--at", type=int, required=True, metavar="SEQ", help="the last seq copied")
    recover = add("recover", cmd_recover, "plait recover", json="JSON Lines, one per session")
    recover.add_argument("--model", help=MODEL)
    add("expire", cmd_expire, "plait expire", json="the count as JSON")
    add("demo", cmd_demo, "plait demo")
    return parser


MODEL_FLAGS = (
    "max_output_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "reasoning_effort",
    "parallel_tool_calls",
)
"""``[model]`` keys that ``exec`` and ``chat`` take as flags too."""


def _add_model_flags(cmd: Parser) -> None:
    """Add ``--model`` and the request options of ``[model]`` (a new session records those
    it started with)."""
    cmd.add_argument("--model", help=MODEL)
    group = cmd.add_argument_group("model options (default: [model])")
    group.add_argument("--max-output-tokens", type=_positive, metavar="N", help="cap each reply")
    group.add_argument("--temperature", type=float, metavar="T")
    group.add_argument("--top-p", type=float, metavar="P")
    group.add_argument("--seed", type=int, metavar="N")
    group.add_argument("--stop", action="append", metavar="TEXT", help="repeat for several")
    group.add_argument("--reasoning-effort", metavar="LEVEL", help="low, medium, high...")
    group.add_argument("--parallel-tool-calls", action=argparse.BooleanOptionalAction)


def _add_shared(parser: Parser, *, top: bool) -> None:
    """Add ``--config``, ``--store`` and ``--debug``, which go before or after the command.

    A command's copies have no default, so that one given before the command stands.
    """
    none, false = (None, False) if top else (argparse.SUPPRESS, argparse.SUPPRESS)
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=none,
        help="the configuration file (default $PLAIT_CONFIG, else ./plait.toml if there is one)",
    )
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        default=none,
        help="a SQLite path or postgresql://... (default $PLAIT_STORE, else [store] url, "
        "else .plait/plait.db)",
    )
    parser.add_argument("--debug", action="store_true", default=false, help="show tracebacks")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``plait`` command; return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:
        # Whoever read stdout left (`plait log | head`): end quietly, with no error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        _err("plait: interrupted")
        return 130
    except (PlaitError, OSError) as exc:
        if args.debug:
            raise
        _err(f"plait: {_one_line(exc)}")
        return 1
    return code


def _one_line(exc: BaseException) -> str:
    """What went wrong, on one line, with what to do where plait knows it."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    if isinstance(exc, StoreError) and "database is locked" in text:
        text += " (another process holds it; [store] busy_timeout_sec says how long to wait)"
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
