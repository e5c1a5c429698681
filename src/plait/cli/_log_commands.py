"""The commands that read and reshape the log: ``sessions``, ``conversations``, ``history``,
``log``, ``show``, ``verify``, ``replay``, ``audit``, ``stats``, ``fork`` and ``expire``.

None of them needs a model or a runtime: they read the store (``replay`` runs the program
against its log), so none imports openai or mcp.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from plait._errors import PlaitError, PrunedSessionError
from plait.cli import _output as render
from plait.cli import _tables as tables
from plait.cli._common import (
    config_of,
    err,
    existing_store,
    find_conversation,
    find_session,
    out,
    signer_of,
    store_of,
)
from plait.cli._style import Style
from plait.cli._words import count

if TYPE_CHECKING:
    from plait.events import EventStore

__all__ = [
    "cmd_audit",
    "cmd_conversations",
    "cmd_expire",
    "cmd_fork",
    "cmd_history",
    "cmd_log",
    "cmd_replay",
    "cmd_sessions",
    "cmd_show",
    "cmd_stats",
    "cmd_tree",
    "cmd_verify",
    "history_rows",
    "session_rows",
]


def cmd_sessions(args: argparse.Namespace) -> int:
    """List the sessions in the store, the one active last first (``plait sessions``)."""
    from plait.cli._listing import listing, session_table

    limit = args.limit or None  # 0: all of them
    with existing_store(args, read_only=True) as store:
        rows, more = listing(store, limit)
        ids = [info.stream for info in store.streams()] if rows and not args.json else []
    if args.json:
        for fields in rows:
            out(render.json_line(fields))
    elif rows:
        width = tables.line_width(sys.stdout)
        headed = tables.wants_header(args, sys.stdout)
        style = Style.for_args(args, sys.stdout)
        for line in session_table(rows, ids, width=width, header=headed, style=style):
            out(line)
    if more:
        hint = "plait sessions --limit 0 lists all"
        err(f"{count(more, 'more session')}, active before these: {hint}")
    return 0


def session_rows(store: EventStore) -> Iterator[dict[str, Any]]:
    """Yield one row of ``plait sessions --json`` per stored session, the one active last
    first."""
    from plait.cli._listing import listing

    yield from listing(store)[0]


def cmd_conversations(args: argparse.Namespace) -> int:
    """List a session's live conversations (``plait conversations``)."""
    from plait.events.projections import HistoryProjection, conversation_index

    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        histories = HistoryProjection().fold(store.read(session))
    for info in conversation_index(histories, session):
        out(render.json_line(info) if args.json else render.conversation_row(info))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print a conversation's history as chat messages (``plait history``)."""
    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        _, rows = history_rows(store, session, args.conversation, args.limit, args.reasoning)
    for row in rows:
        out(render.json_line(row) if args.json else render.message_row(row))
    return 0


def history_rows(
    store: EventStore,
    session: str,
    conversation: str | None = None,
    limit: int | None = None,
    reasoning: bool = False,
) -> tuple[str, list[dict[str, Any]]]:
    """Return the id of a conversation of ``session`` (the root, or the one ``conversation``
    is a prefix of) and its last ``limit`` messages (all: ``None``) as ``plait history
    --json`` prints them: ``seq``, then the chat message, then its reasoning if asked."""
    from plait.events import SessionStarted, as_text
    from plait.events.projections import HistoryProjection

    events = store.read(session)
    histories = HistoryProjection().fold(events)
    started = events[0].body
    root = started.root_conversation_id if isinstance(started, SessionStarted) else ""
    found = find_conversation(histories.conversations, session, conversation or root)
    messages = histories.conversations[found].messages
    rows = []
    for message in messages[-limit:] if limit else messages:
        row = {"seq": message.seq, **message.to_openai()}
        if reasoning and message.reasoning is not None:
            row["reasoning"] = as_text(message.reasoning)
        rows.append(row)
    return found, rows


def cmd_log(args: argparse.Namespace) -> int:
    """Print every event of a session (``plait log``)."""
    style = Style.for_args(args, sys.stdout)
    row = render.event_json if args.json else partial(tables.event_row, style=style)
    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        if args.unverified:  # what is there, said to be unchecked
            err(f"{session}: --unverified: shown as stored, not checked against the hash chain")
        events = store.read(session, check=not args.unverified)
        if tables.wants_header(args, sys.stdout):
            out(tables.LOG_HEADER)
        for event in events:
            out(row(event))
        if not args.follow:
            return 0
        sys.stdout.flush()
        err(f"following {session}; Ctrl-C to stop")
        try:
            with store.subscribe(events[-1].position) as feed:
                for event in feed:
                    if event.stream == session:
                        out(row(event))
                        sys.stdout.flush()
        except KeyboardInterrupt:
            return 0  # how a follow ends
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Show a session's conversations, histories, audit and chain check (``plait show``)."""
    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        # read refuses what fails its hash or chain; verify adds the columns, blobs and head
        events, report = store.read(session), store.verify(session)
    if args.json:
        from plait.cli._summary import session_summary

        out(render.json_line(session_summary(events, report)))
    else:
        render.show_session(events, report, sys.stdout)
    return 0 if report.ok else 1


def cmd_tree(args: argparse.Namespace) -> int:
    """Draw a session's conversations as a tree, with their tasks (``plait tree``)."""
    from plait.cli._tree import tree_lines

    with existing_store(args, read_only=True) as store:
        events = store.read(find_session(store, args.session), resolve_blobs=False)
    for line in tree_lines(events, Style.for_args(args, sys.stdout)):
        out(line)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check a session's rows, signed heads and store, or a bundle (``plait verify``)."""
    from plait.cli._evidence import check_bundle
    from plait.cli._keys import misused, proof_failed, proof_of, signed_line

    problem = misused(args.session, args.bundle, args.public_key, args.witness)
    if problem is not None:
        err(f"plait: {problem}")
        return 2
    if args.bundle is not None:
        return check_bundle(args)
    key, witness, missing = proof_of(args.public_key, args.witness)
    with existing_store(args, read_only=True) as store:
        try:
            session = find_session(store, args.session)
        except PrunedSessionError as gone:  # its record is what there is to verify
            session = gone.session_id
        report = store.verify(session, public_key=key, witness=witness)
        damaged = store.check_file(full=args.full)
    failed = proof_failed(report)
    if args.json:
        fields = msgspec.to_builtins(report)
        signed = fields.pop("signatures")
        extra = {"signatures": signed} if signed is not None else {}
        out(
            render.json_line(
                {"session_id": fields.pop("stream"), **fields, "file": damaged, **extra}
            )
        )
    elif not report.ok and not failed:  # no seq: the damage is in the store's positions
        at = "" if report.first_bad_seq is None else f"seq {report.first_bad_seq}: "
        out(f"tampered: {at}{report.reason}")
    elif damaged is not None:
        out(f"damaged: {damaged}")
    elif failed:
        out(report.reason)
    elif report.pruned is not None:
        line = f"pruned: {report.pruned.line()}"
        if report.signatures is not None and report.signatures.witness_seq is not None:
            seq = report.signatures.witness_seq
            line += f"; the witness's last head of it, seq {seq}, is the record's"
        out(line)
    else:
        line = f"ok: {report.events} events, {report.blobs} blobs ({report.redacted} redacted)"
        if report.signatures is not None and report.signatures.signed:
            line += f"; {signed_line(report.signatures, missing)}"
        if report.pruned_sessions:
            held = count(report.pruned_sessions, "session")
            line += f"; {held} pruned ({count(report.pruned_events, 'event')}), accounted for"
        out(line)
    return 0 if report.ok and damaged is None else 1


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a session from its log, no network or key (``plait replay``)."""
    from plait.cli._listing import live_replay_line, live_state
    from plait.replay import replay

    if args.live:
        from plait.cli._rerun import cmd_rerun

        return cmd_rerun(args)
    if len(args.session) != 1:
        raise PlaitError("plait replay: name one session (several only with --live)")
    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session[0])
        result = replay(store, session, max_interrupt_chain_depth=args.max_interrupt_chain_depth)
        live = live_state(store, session)  # after the replay: a session may start meanwhile
        growing = live is not None and store.last_seq(session) > result.total
    if args.json:
        out(render.json_line({**msgspec.to_builtins(result), "live": live}))
    elif live is not None:
        out(live_replay_line(session, result, live, growing))
        if result.divergence is not None:
            out(result.divergence.message())
    elif result.divergence is None:
        out(f"replayed {result.events} of {result.total} events: no difference")
    else:
        out(f"diverged after {result.events} of {result.total} events:")
        out(result.divergence.message())
    return 0 if result.ok else 1


def cmd_audit(args: argparse.Namespace) -> int:
    """List every tool call of a session (``plait audit``)."""
    from plait.replay import audit

    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        rows = audit(
            store, session, tool=args.tool, conversation_id=args.conversation, outcome=args.outcome
        )
    if args.json:
        for row in rows:
            out(render.json_line(render.audit_fields(row)))
        return 0
    style = Style.for_args(args, sys.stdout)
    if rows and tables.wants_header(args, sys.stdout):
        out(tables.AUDIT_HEADER)
    for row in rows:
        out(tables.audit_row(row, style))
    err(f"{count(len(rows), 'call')}; {_model_errors(args, session)}")
    return 0


def _model_errors(args: argparse.Namespace, session: str) -> str:
    """How many of the session's turns the model server failed, by kind."""
    from plait.events import TurnAborted

    with existing_store(args, read_only=True) as store:
        kinds = [
            e.body.model_error
            for e in store.read(session, resolve_blobs=False)
            if isinstance(e.body, TurnAborted) and e.body.model_error is not None
        ]
    by_kind = ", ".join(f"{kind} {kinds.count(kind)}" for kind in sorted(set(kinds)))
    return f"{len(kinds)} model errors" + (f" ({by_kind})" if kinds else "")


def cmd_stats(args: argparse.Namespace) -> int:
    """Show what each conversation of a session did (``plait stats``)."""
    from plait.events import McpServerFailed, McpServerReady
    from plait.events.projections import StatsProjection

    with existing_store(args, read_only=True) as store:
        session = find_session(store, args.session)
        events = store.read(session, resolve_blobs=False)
        stats = StatsProjection().fold(events)
    style = Style.for_args(args, sys.stdout)
    if stats.conversations and tables.wants_header(args, sys.stdout):
        out(tables.STATS_HEADER)
    for conversation in stats.conversations.values():
        if args.json:
            fields = msgspec.to_builtins(conversation)
            out(render.json_line({**fields, "mcp_ms_mean": conversation.mcp_ms_mean}))
        else:
            out(tables.stats_row(conversation, style))
    ready: set[str] = set()
    for event in events:  # servers that failed for good, as `plait exec` warned of them
        body = event.body
        if isinstance(body, McpServerReady):
            ready.add(body.server)
        elif isinstance(body, McpServerFailed) and body.retry_in_sec is None:
            what = "gave up" if body.server in ready else "did not start"
            if args.json:
                row = {"mcp_server": body.server, "failed": what, "reason": body.reason}
                out(render.json_line({**row, "attempt": body.attempt}))
            else:
                out(f"mcp server {body.server}: {what}: {' '.join(body.reason.split())}")
    return 0


# --- changing the log ------------------------------------------------------------------------


def cmd_fork(args: argparse.Namespace) -> int:
    """Copy a session's events up to a seq into a new session (``plait fork``)."""
    from plait.replay import fork

    config = config_of(args, mcp_servers=False)
    with store_of(config, create=False) as store:
        session = find_session(store, args.session)
        new = fork(store, session, args.at, signer=signer_of(config))
    ids = {"session_id": new, "forked_from": session, "at_seq": args.at}
    out(render.json_line(ids) if args.json else new)
    err(f"forked {session} at seq {args.at}; go on with: plait exec --session {new[:8]} PROMPT")
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    """Delete the content of ``ttl`` conversations that is due (``plait expire``)."""
    # What Runtime.expire_content does, without the model client a Runtime insists on.
    from plait.events import Expiry

    with existing_store(args) as store:
        deleted = Expiry(store).sweep()
    out(
        render.json_line({"deleted": deleted}) if args.json else f"deleted {count(deleted, 'blob')}"
    )
    return 0
