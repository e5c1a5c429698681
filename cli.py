"""The ``plait`` command.

Results go to stdout, progress and errors to stderr. A ``PlaitError`` is one line and exit code
1; a traceback only with ``--debug``. Heavy imports happen inside the commands that need them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plait.errors import PlaitError

DEFAULT_STORE = ".plait/plait.db"


def _store_url(args: argparse.Namespace) -> str:
    return str(args.store or os.environ.get("PLAIT_STORE") or DEFAULT_STORE)


def _open(args: argparse.Namespace) -> Any:
    from plait.events.stores import open_store

    url = _store_url(args)
    if "://" not in url and url != "memory:" and not Path(url).exists():
        raise PlaitError(f"{url}: no store here (run `plait demo` first, or pass --store)")
    return open_store(url)


def _session(store: Any, session: str) -> str:
    known = [info.stream for info in store.streams()]
    matches = [s for s in known if s.startswith(session)]
    if len(matches) != 1:
        what = "no session" if not matches else f"{len(matches)} sessions"
        raise PlaitError(f"{what} in the store match {session!r} (see `plait sessions`)")
    return str(matches[0])


def _print_json(value: Any) -> None:
    import msgspec

    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


def cmd_demo(args: argparse.Namespace) -> int:
    """Run a session offline against a scripted model, then show what its log holds."""
    from plait.demo import run_demo

    url = _store_url(args)
    session, outcome = run_demo(url, sys.stdout, sys.stderr)
    with _open(args) as store:
        _show_session(store, session)
    print(f"\nstored in {url}; try: plait log {session[:8]}", file=sys.stderr)
    return 0 if outcome.ok else 1


def _show_session(store: Any, session: str) -> None:
    from plait.events.projections import (
        AuditProjection,
        HistoryProjection,
        TokensProjection,
        conversation_index,
    )

    events = store.read(session)
    histories = HistoryProjection().fold(events)
    print("\nconversations")
    for info in conversation_index(histories, session):
        parent = f"  (created by {info.parent_id[:8]})" if info.parent_id else "  (root)"
        active = f"last active {info.last_active_at}"
        print(f"  {info.id[:8]}  {info.message_count:>2} messages  {active}{parent}")
    for conv in histories.conversations.values():
        print(f"\nhistory of {conv.id[:8]}")
        for message in conv.messages:
            wire = message.to_openai()
            calls = "".join(
                f" -> {c['function']['name']}({c['function']['arguments']})"
                for c in wire.get("tool_calls", [])
            )
            print(f"  {wire['role']:>9}: {wire['content'] or ''}{calls}")
    print("\ntool calls (audit)")
    for row in AuditProjection().fold(events).rows:
        print(
            f"  seq {row.seq:>3}  {row.tool:<12} {row.outcome:<7} {row.duration_ms or 0:>6.1f} ms"
            f"  conversation {str(row.conversation_id)[:8]}  args {row.arguments}"
        )
    tokens = TokensProjection().fold(events).by_session.get(session)
    if tokens is not None:
        print(f"\ntokens: {tokens.prompt_tokens} prompt + {tokens.completion_tokens} completion")
    report = store.verify(session)
    state = "intact" if report.ok else f"BROKEN at seq {report.first_bad_seq}: {report.reason}"
    print(f"\nhash chain: {report.events} events, {state}")


def cmd_sessions(args: argparse.Namespace) -> int:
    """List the sessions in the store."""
    with _open(args) as store:
        for info in store.streams():
            if args.json:
                _print_json(info)
            else:
                print(f"{info.stream}  {info.last_seq} events")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    """Print every event of a session."""
    from plait.events.codec import to_jsonl

    with _open(args) as store:
        session = _session(store, args.session)
        events = store.read(session)
        if args.json:
            for line in to_jsonl(events):
                sys.stdout.write(line.decode())
            return 0
        for e in events:
            body = type(e.body).__name__
            where = f"{(e.conversation_id or '-')[:8]:<8} {(e.task_id or '-')[:8]:<8}"
            print(f"{e.seq:>5}  {e.at.isoformat(timespec='milliseconds')}  {where}  {body}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Show a session's conversations, histories, audit and chain check."""
    with _open(args) as store:
        _show_session(store, _session(store, args.session))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check a session's hash chain and blobs; exit 1 if anything was edited."""
    with _open(args) as store:
        report = store.verify(_session(store, args.session))
        if args.json:
            _print_json(report)
        elif report.ok:
            print(f"ok: {report.events} events, {report.blobs} blobs ({report.redacted} redacted)")
        else:
            print(f"tampered: seq {report.first_bad_seq}: {report.reason}")
        return 0 if report.ok else 1


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a session from its log, no network or key; exit 1 at the first difference."""
    from plait.replay import replay

    with _open(args) as store:
        session = _session(store, args.session)
        result = replay(store, session, max_interrupt_chain_depth=args.max_interrupt_chain_depth)
    if args.json:
        _print_json(result)
    elif result.divergence is None:
        print(f"replayed {result.events} of {result.total} events: no difference")
    else:
        print(f"diverged after {result.events} of {result.total} events:")
        print(result.divergence.message())
    return 0 if result.ok else 1


def cmd_audit(args: argparse.Namespace) -> int:
    """List every tool call of a session: tool, server, outcome, size, duration."""
    from plait.replay import audit, audit_jsonl

    with _open(args) as store:
        rows = audit(
            store,
            _session(store, args.session),
            tool=args.tool,
            conversation_id=args.conversation,
            outcome=args.outcome,
        )
    if args.json:
        sys.stdout.buffer.write(audit_jsonl(rows))
        return 0
    for row in rows:
        took = f"{row.duration_ms:8.1f} ms" if row.duration_ms is not None else "       - ms"
        size = f"{row.output_size} B" if row.output_size is not None else "-"
        print(
            f"seq {row.seq:4}  {row.tool:<28} {row.outcome:<8} {took}  {size:>9}  "
            f"{row.server or '-':<10} conversation {(row.conversation_id or '')[:8]}"
        )
    print(f"{len(rows)} calls", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``plait`` command."""
    parser = argparse.ArgumentParser(
        prog="plait",
        description="Replayable, auditable, crash-safe LLM agent sessions.",
        epilog="example: plait demo && plait sessions",
    )
    parser.add_argument(
        "--store", help=f"store path or URL (default $PLAIT_STORE or {DEFAULT_STORE})"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, fn: Callable[[argparse.Namespace], int], example: str
    ) -> argparse.ArgumentParser:
        doc = (fn.__doc__ or "").strip()
        cmd = sub.add_parser(name, help=doc, description=doc, epilog=f"example: {example}")
        cmd.set_defaults(func=fn)
        return cmd

    add("demo", cmd_demo, "plait demo")
    add("sessions", cmd_sessions, "plait sessions --json").add_argument(
        "--json", action="store_true", help="JSON Lines"
    )
    for name, fn in (("log", cmd_log), ("show", cmd_show), ("verify", cmd_verify)):
        cmd = add(name, fn, f"plait {name} 3f2a")
        cmd.add_argument("session", help="session id (a unique prefix is enough)")
        if name != "show":
            cmd.add_argument("--json", action="store_true", help="JSON Lines")
    replay = add("replay", cmd_replay, "plait replay 3f2a")
    replay.add_argument("session", help="session id (a unique prefix is enough)")
    replay.add_argument("--json", action="store_true", help="the result as JSON")
    replay.add_argument(
        "--max-interrupt-chain-depth",
        type=int,
        help="replay as if the program had this limit (default: as the session recorded)",
    )
    audit = add("audit", cmd_audit, "plait audit 3f2a --outcome error")
    audit.add_argument("session", help="session id (a unique prefix is enough)")
    audit.add_argument("--json", action="store_true", help="JSON Lines")
    audit.add_argument("--tool", help="a tool name, or a server prefix such as git__")
    audit.add_argument("--conversation", help="a conversation id")
    audit.add_argument(
        "--outcome", choices=["ok", "error", "timeout", "refused", "unknown", "pending"]
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``plait`` command; return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except PlaitError as exc:
        if args.debug:
            raise
        print(f"plait: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
