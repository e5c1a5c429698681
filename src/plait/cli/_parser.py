"""The ``plait`` command line: the parser of every command and flag, and ``main``, which runs
the command given and turns a user's error into one line and an exit code."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

from plait._errors import PlaitError, StoreError
from plait.cli._commands import COMMANDS, Command
from plait.cli._flags import (
    MODEL,
    SHELLS,
    add_grace,
    add_model_flags,
    add_prune_flags,
    add_rerun_flags,
    add_shared,
    add_trace_flags,
    non_negative_int,
    port,
    positive,
)
from plait.cli._inputs import check_arguments
from plait.cli._lifetime import LIFETIME
from plait.cli._version import VersionAction

__all__ = ["build_parser", "main"]

Parser = argparse.ArgumentParser
SESSION = "session id (a unique prefix is enough)"
PLAN_TOOL = "offer the model update_plan: a plan of its work, shown as it changes (a new session)"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``plait`` command."""
    parser = argparse.ArgumentParser(
        prog="plait",
        description="Replayable, auditable, crash-safe LLM agent sessions.",
        epilog='example: plait exec "What changed since the last release?" && plait sessions',
    )
    add_shared(parser, top=True)
    parser.add_argument("--version", action=VersionAction, help="print plait's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, *examples: str, json: str | None = None) -> Parser:
        command = COMMANDS[name]  # its module is imported when it runs, not here
        doc = command.doc.replace("``", "`")
        cmd = sub.add_parser(
            name,
            help=doc.split(";")[0].rstrip("."),
            description=textwrap.fill(doc, 79),  # the epilog's examples keep their lines
            epilog="example: " + "\n         ".join(examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.set_defaults(func=command)
        add_shared(cmd, top=False)
        if json is not None:
            cmd.add_argument("--json", action="store_true", help=json)
        return cmd

    def reader(name: str, *examples: str, json: str = "JSON Lines") -> Parser:
        cmd = add(name, *examples, json=json)
        cmd.add_argument("session", help=SESSION)
        return cmd

    run = add(
        "exec",
        'plait exec "Summarise the open issues."',
        'plait exec --session 3f2a "And the closed ones?"',
        "plait exec --json - < prompt.txt | jq -c 'select(.body.type == \"ToolCallRequested\")'",
        json="stream JSON Lines: each event as `plait log --json` prints it, each text delta "
        'as {"type": "AgentMessageDelta", ...}, last {"type": "TaskOutcome", ...}',
    )
    run.add_argument("prompt", metavar="PROMPT", help="what to do; - reads it from stdin")
    run.add_argument("--session", help="go on with this session (default: a new one)")
    run.add_argument(
        "--last", action="store_true", help="go on with the session active last in the store"
    )
    run.add_argument("--conversation", help="run in this conversation of the --session")
    add_model_flags(run)
    run.add_argument("--plan-tool", action="store_true", help=PLAN_TOOL)
    add_grace(run, "SIGTERM (SIGINT interrupts the task)")
    talk = add("chat", "plait chat", "plait chat --session 3f2a")
    talk.add_argument("--session", help="go on with this session (default: a new one)")
    talk.add_argument(
        "--last", action="store_true", help="go on with the session active last in the store"
    )
    add_model_flags(talk)
    talk.add_argument("--plan-tool", action="store_true", help=PLAN_TOOL)
    add_grace(talk, "SIGTERM")
    again = add("resume", "plait resume 3f2a", "plait resume --last")
    again.add_argument("session", nargs="?", help=SESSION)
    again.add_argument("--last", action="store_true", help="the session active last in the store")
    add_model_flags(again)
    add_grace(again, "SIGTERM")
    serve = add(
        "mcp-server",
        "plait mcp-server",
        "plait mcp-server --http 8765 --model gpt-4o-mini",
    )
    serve.add_argument(
        "--http",
        type=port,
        metavar="PORT",
        help="serve streamable HTTP on PORT (0: any free one), at /mcp",
    )
    serve.add_argument("--host", default="127.0.0.1", help="with --http: the address to bind")
    add_model_flags(serve)
    add_grace(serve)
    compact = reader(
        "compact",
        "plait compact 3f2a",
        "plait compact 3f2a --conversation 9c1d --json",
        json="the HistoryCompacted event as JSON",
    )
    compact.add_argument("--conversation", help="a conversation id or prefix (default: the root)")
    compact.add_argument("--model", help=MODEL)
    sessions = add("sessions", "plait sessions --limit 5", json="JSON Lines")
    sessions.add_argument(
        "--limit",
        type=non_negative_int,
        default=20,
        metavar="N",
        help="the N active last (20; 0: all)",
    )
    reader("conversations", "plait conversations 3f2a")
    history = reader("history", "plait history 3f2a --conversation 9c1d --limit 10")
    history.add_argument("--conversation", help="a conversation id or prefix (default: the root)")
    history.add_argument("--limit", type=positive, metavar="N", help="only the last N messages")
    history.add_argument(
        "--reasoning", action="store_true", help="show the model's reasoning, where it sent any"
    )
    log = reader("log", "plait log 3f2a", "plait log 3f2a --follow --json")
    log.add_argument("--follow", action="store_true", help="go on printing events as they come")
    log.add_argument(
        "--unverified",
        action="store_true",
        help="show the events as stored even where they fail their hash chain check",
    )
    reader(
        "show",
        "plait show 3f2a",
        "plait show 3f2a --json | jq .plans",
        json="a summary as one JSON object: id, model, state, conversations, tasks, tool "
        "calls, tokens, plans",
    )
    audit = reader("audit", "plait audit 3f2a --outcome error")
    audit.add_argument("--tool", help="a tool name, or a server prefix such as git__")
    audit.add_argument("--conversation", help="a conversation id")
    outcomes = ["ok", "error", "timeout", "refused", "unknown", "cancelled", "aborted", "pending"]
    audit.add_argument("--outcome", choices=outcomes)
    add("tree", "plait tree 3f2a").add_argument("session", help=SESSION)
    reader("stats", "plait stats 3f2a", "plait stats 3f2a --json")
    verify = add(
        "verify",
        "plait verify 3f2a",
        "plait verify 3f2a --public-key audit.key.pub",
        "plait verify --bundle 3f2a.zip --public-key audit.key.pub",
        json="the report as JSON",
    )
    verify.add_argument("session", nargs="?", help=f"{SESSION} (or --bundle)")
    verify.add_argument(
        "--bundle",
        metavar="FILE",
        help="check the evidence bundle FILE (plait export) instead: no store is read",
    )
    verify.add_argument(
        "--full", action="store_true", help="check the whole SQLite file (integrity_check)"
    )
    verify.add_argument(
        "--public-key",
        metavar="PATH",
        help="check the session's signed heads with this public key (PATH.pub of keygen)",
    )
    verify.add_argument(
        "--witness",
        metavar="PATH",
        help="the witness of signed heads to check the log against (default: PATH.heads "
        "beside PATH.pub, if there)",
    )
    du = add("du", "plait du", "plait du 3f2a", "plait du --json | jq -s .", json="JSON Lines")
    du.add_argument("session", nargs="*", help=f"{SESSION}; none: every session")
    trace = add(
        "trace",
        "plait trace 3f2a --endpoint http://127.0.0.1:4318",
        "plait trace --since 2h",
        "plait trace 3f2a --json | jq '.resourceSpans[].scopeSpans[].spans[].name'",
    )
    add_trace_flags(trace)
    replay = add(
        "replay",
        "plait replay 3f2a",
        "plait replay 3f2a --live --model gpt-4o",
        "plait replay --live --all --since 7d --concurrency 8 --fail-on tools",
        json="the result as JSON (--live: one line per session)",
    )
    replay.add_argument("session", nargs="*", help=f"{SESSION} (--live: one or more)")
    replay.add_argument(
        "--max-interrupt-chain-depth",
        type=int,
        help="replay as if the program had this limit (default: as the session recorded)",
    )
    add_rerun_flags(replay)
    fork = reader("fork", "plait fork 3f2a --at 41", json="the ids as JSON")
    fork.add_argument("--at", type=int, required=True, metavar="SEQ", help="the last seq copied")
    recover = add("recover", "plait recover", json="JSON Lines, one per session")
    recover.add_argument("--model", help=MODEL)
    worker = add(
        "worker",
        "plait worker --store postgresql://db/plait",
        "plait worker --concurrency 50 --lease-sec 5",
    )
    worker.add_argument("--model", help=MODEL)
    worker.add_argument(
        "--concurrency", type=positive, metavar="N", help="run at most N tasks at once"
    )
    worker.add_argument(
        "--max-active-sessions",
        type=positive,
        metavar="N",
        help="keep at most N sessions' actors running (default 8 x --concurrency)",
    )
    worker.add_argument(
        "--lease-sec",
        type=float,
        default=10.0,
        metavar="S",
        help="how long its sessions wait for another worker if it dies (default 10)",
    )
    add_grace(worker)
    worker.add_argument("--drain-sec", dest="grace_sec", type=float, help=argparse.SUPPRESS)
    worker.add_argument(
        "--idle-sec",
        type=float,
        default=60.0,
        metavar="S",
        help="hand back a session idle this long, for any worker to take (default 60)",
    )
    export = add("export", "plait export 3f2a -o 3f2a.zip")
    export.add_argument("session", help=SESSION)
    export.add_argument(
        "-o", "--out", required=True, metavar="FILE", help="the bundle to write (not overwritten)"
    )
    export.add_argument(
        "--witness",
        metavar="PATH",
        help="the witness whose lines of the session it carries (default: [audit] witness, "
        "else the signing key's PATH.heads, if there)",
    )
    export.add_argument(
        "--public-key",
        metavar="PATH",
        help="verify the session with this public key first; the manifest says what it found",
    )
    keygen = add("keygen", "plait keygen --out ~/.plait/audit.key")
    keygen.add_argument("--out", required=True, metavar="PATH", help="where the private key goes")
    add("expire", "plait expire", json="the count as JSON")
    forget = reader(
        "forget",
        'plait forget 3f2a --by "privacy desk" --reason "request 1142"',
        "plait forget 3f2a --conversation 9c1e --yes",
        json="what was erased as JSON",
    )
    forget.add_argument(
        "--conversation",
        action="append",
        metavar="ID",
        help="erase only this conversation's content (again for more)",
    )
    forget.add_argument("--by", metavar="NAME", help="who asks (default: the user running it)")
    forget.add_argument("--reason", metavar="TEXT", help="why: a request's reference, say")
    forget.add_argument("--yes", action="store_true", help="do not ask (it cannot be undone)")
    add_prune_flags(
        add(
            "prune",
            "plait prune --closed-before 2026-01-01",
            "plait prune --idle-before 90d --dry-run",
            json="the report as one JSON object",
        )
    )
    add("demo", "plait demo")
    complete = add(
        "completion",
        "plait completion fish > ~/.config/fish/completions/plait.fish",
        'eval "$(plait completion bash)"  # in ~/.bashrc; zsh: in ~/.zshrc',
    )
    complete.add_argument("shell", choices=SHELLS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``plait`` command; return its exit code."""
    if "_ARGCOMPLETE" in os.environ:  # a shell asks what completes its line (``completion``)
        import argcomplete

        argcomplete.autocomplete(build_parser(), always_complete_options=False)  # and exits
    try:
        check_arguments(sys.argv[1:] if argv is None else argv)
    except PlaitError as exc:
        LIFETIME.end(1)
        sys.stderr.write(f"plait: {exc}\n")
        return 1
    args = build_parser().parse_args(argv)
    _log_to_stderr(args.verbose)
    # The command's code is imported only now (not for --help or --version), and before it
    # runs: a signal meanwhile ends the process with its one line, as during every import.
    command: Command = args.func
    run = command.load()
    from plait.cli._common import err, reader_left
    from plait.cli._stopping import Stopped

    # Each way the command ends tells LIFETIME its code before its line is said: a signal
    # from there on exits with that code, and says nothing more (docs/processes.md#stopping).
    LIFETIME.run()
    try:
        code = run(args)
    except BrokenPipeError:
        LIFETIME.end(0)
        reader_left()  # `plait log | head`: end quietly, with no error at exit
        return 0
    except KeyboardInterrupt:  # SIGINT before the command put in its own handler, or after
        LIFETIME.end(130)
        err(f"{_after_ctrl_c()}plait: stopped by SIGINT")
        return 130
    except Stopped as stopped:  # SIGTERM or SIGINT: the command says what it stopped
        LIFETIME.end(stopped.code)
        fresh = stopped.fresh_line or stopped.code != 128 + signal.SIGINT
        err(f"{'' if fresh else _after_ctrl_c()}plait: {stopped.line}")
        return stopped.code
    except (PlaitError, OSError) as exc:
        LIFETIME.end(1)
        if args.debug:
            raise
        err(f"plait: {_one_line(exc)}")
        return 1
    LIFETIME.end(code)
    return code


def _after_ctrl_c() -> str:
    """A newline where the error would follow what its line holds: on a terminal, the ``^C``
    it echoed after the partial answer (``word7^C``)."""
    with contextlib.suppress(OSError):
        sys.stdout.flush()  # the partial answer first
    return "\n" if sys.stderr.isatty() else ""


def _log_to_stderr(verbosity: int) -> None:
    """Send the ``plait`` loggers' records to stderr: warnings, one line each without their
    traceback (other libraries' records are dropped: what fails reaches the user as plait's
    error); INFO with ``-v``, DEBUG with ``-vv``, tracebacks and other libraries' warnings too.
    """
    logger = logging.getLogger("plait")
    for handler in [h for h in logger.handlers if h.get_name() == "plait-stderr"]:
        logger.removeHandler(handler)  # main ran before, in this process
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name("plait-stderr")
    logger.addHandler(handler)
    root = logging.getLogger()
    quiet = [h for h in root.handlers if h.get_name() == "plait-quiet"]
    if verbosity:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
        for other in quiet:
            root.removeHandler(other)
        return
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    logger.setLevel(logging.NOTSET)
    if not quiet:  # a handler on the root: Python's last resort no longer prints the others
        null = logging.NullHandler()
        null.set_name("plait-quiet")
        root.addHandler(null)


class _OneLine(logging.Formatter):
    """A record as ``plait: message`` on one line, without its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return "plait: " + " ".join(record.getMessage().splitlines())


def _one_line(exc: BaseException) -> str:
    """What went wrong, on one line, with what to do where plait knows it."""
    if isinstance(exc, OSError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    if isinstance(exc, StoreError) and "database is locked" in text:
        text += " (another process holds it; [store] busy_timeout_sec says how long to wait)"
    return " ".join(text.split())
