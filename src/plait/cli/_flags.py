"""The flags of ``plait``'s commands beyond their few own: those several commands share
(``--config``, ``--store``, ``-v``..., the model's options, ``--grace-sec``), the larger sets
of one (``replay --live``, ``trace``, ``prune``), and the argument types that say what they
expected. The parser reads them at every start: this module imports nothing of plait's heavy
parts (docs/processes.md#stopping)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from plait.cli._style import CHOICES

__all__ = [
    "DEFAULT_GRACE_SEC",
    "MODEL",
    "SHELLS",
    "add_grace",
    "add_model_flags",
    "add_prune_flags",
    "add_rerun_flags",
    "add_shared",
    "add_trace_flags",
    "non_negative_int",
    "port",
    "positive",
    "seconds",
    "since",
]

SHELLS = ("bash", "zsh", "fish")
"""The shells ``plait completion`` makes a script for."""

Parser = argparse.ArgumentParser
DEFAULT_GRACE_SEC = 5.0
"""How long a running task may take to end once the command is told to stop."""
MODEL = "the model name (default $PLAIT_MODEL, else [model] model)"
"""The help of ``--model``, wherever a command takes it."""


def add_model_flags(cmd: Parser) -> None:
    """Add ``--model`` and the request options of ``[model]`` (a new session records those
    it started with)."""
    # The dests of the group are common.MODEL_FLAGS, which config_of reads.
    cmd.add_argument("--model", help=MODEL)
    group = cmd.add_argument_group("model options (default: [model])")
    group.add_argument("--max-output-tokens", type=positive, metavar="N", help="cap each reply")
    group.add_argument("--temperature", type=float, metavar="T")
    group.add_argument("--top-p", type=float, metavar="P")
    group.add_argument("--seed", type=int, metavar="N")
    group.add_argument("--stop", action="append", metavar="TEXT", help="repeat for several")
    group.add_argument("--reasoning-effort", metavar="LEVEL", help="low, medium, high...")
    group.add_argument("--parallel-tool-calls", action=argparse.BooleanOptionalAction)


def add_shared(parser: Parser, *, top: bool) -> None:
    """Add ``--config``, ``--store``, ``--debug``, ``--verbose`` and ``--color``, which go
    before or after the command.

    A command's copies have no default, so that one given before the command stands.
    """
    none, false = (None, False) if top else (argparse.SUPPRESS, argparse.SUPPRESS)
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=none,
        help="the configuration file (default $PLAIT_CONFIG, else the nearest plait.toml from "
        "here up to the repository's root; outside one, up to your home directory, or to / "
        "when not under it; one of another user's is not used)",
    )
    parser.add_argument(
        "--store",
        metavar="PATH|URL",
        default=none,
        help="a SQLite path or postgresql://... (default $PLAIT_STORE, else [store] url, "
        "else the project's .plait/plait.db)",
    )
    parser.add_argument(
        "-c",
        dest="overrides" if top else "command_overrides",  # config_of reads both
        action="append",
        default=[] if top else argparse.SUPPRESS,
        metavar="KEY.PATH=VALUE",
        help="set a configuration key over the files and the environment (the value read as "
        "TOML, else as text): -c model.model=gpt-4o -c mcp_servers.git.enabled=false",
    )
    parser.add_argument("--debug", action="store_true", default=false, help="show tracebacks")
    parser.add_argument(
        "--verbose",
        "-v",
        action="count",
        default=0 if top else argparse.SUPPRESS,
        help="say on stderr which files, store, model and MCP servers are used (-vv: and "
        "each model request's size and timing)",
    )
    parser.add_argument(
        "--color",
        choices=CHOICES,
        default=none,
        help="colour on a terminal (default auto: not in pipes, not with $NO_COLOR set)",
    )


Number = TypeVar("Number", int, float)


def _bounded(
    convert: Callable[[str], Number], ok: Callable[[Number], bool], expected: str
) -> Callable[[str], Number]:
    """An argument type: ``convert`` the text, refused unless ``ok`` (the error: ``expected
    EXPECTED, got TEXT``, not Python's name of the type)."""

    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}") from None
        if not ok(value):  # NaN too, for seconds
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value

    return parse


positive = _bounded(int, lambda v: v >= 1, "a positive number")
non_negative_int = _bounded(int, lambda v: v >= 0, "a number, 0 or more")
seconds = _bounded(float, lambda v: v >= 0, "seconds, 0 or more")
port = _bounded(int, lambda v: 0 <= v < 65536, "a port from 0 to 65535")


def add_grace(cmd: Parser, signals: str = "SIGTERM or SIGINT") -> None:
    cmd.add_argument(
        "--grace-sec",
        type=seconds,
        default=DEFAULT_GRACE_SEC,
        metavar="S",
        help=f"on {signals}, how long a running task may take to end before it is cut and "
        f"its session handed back (default {DEFAULT_GRACE_SEC:g})",
    )


def since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: ``30m``, ``2h``, ``7d`` ago, or an ISO 8601 time (UTC unless it says)."""
    from plait.events import DURATION_UNITS, duration_sec  # imports plait.events

    try:
        if text.strip()[-1:] in DURATION_UNITS:  # an ISO time ends in a digit or a zone
            return (now or datetime.now(UTC)) - timedelta(seconds=duration_sec(text))
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: not a time: give 30m, 2h, 7d or an ISO 8601 time (2026-11-20T09:00)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def add_rerun_flags(replay: argparse.ArgumentParser) -> None:
    """The options of ``plait replay --live``."""
    add_model_flags(replay)  # the model the tasks are sent to now
    live = replay.add_argument_group("live rerun (--live)")
    live.add_argument(
        "--live",
        action="store_true",
        help="run the session's tasks again against the model configured now, its tool calls "
        "answered from the log, and report what changed (exit 1 if anything did)",
    )
    live.add_argument(
        "--tools",
        choices=["log", "live"],
        default="log",
        help="a call the original never made: answered 'not recorded' (log), or run (live)",
    )
    live.add_argument(
        "--fail-on",
        choices=["tools", "answers", "any"],
        default="any",
        help="what makes the exit code 1: changed tool calls, answers, or either",
    )
    live.add_argument("--no-save", action="store_true", help="keep nothing of the rerun")
    live.add_argument("--all", action="store_true", help="every session (not reruns)")
    live.add_argument(
        "--since", type=since, metavar="WHEN", help="with --all: sessions started since WHEN"
    )
    live.add_argument("--limit", type=int, metavar="N", help="with --all: the N newest")
    live.add_argument(
        "--concurrency", type=int, default=4, metavar="N", help="sessions rerun at once"
    )
    live.add_argument(
        "--timeout", type=float, default=300.0, metavar="SEC", help="the longest a task may run"
    )


def add_trace_flags(trace: argparse.ArgumentParser) -> None:
    """The arguments of ``plait trace``."""
    trace.add_argument(
        "session",
        nargs="*",
        help="session ids (a unique prefix is enough); none: every session (--since)",
    )
    where = trace.add_mutually_exclusive_group()
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="the OTLP/HTTP base URL to send the spans to (default: [telemetry] otlp_endpoint, "
        "else OTEL_EXPORTER_OTLP_ENDPOINT)",
    )
    where.add_argument(
        "--json", action="store_true", help="print the spans as OTLP JSON instead of sending"
    )
    trace.add_argument(
        "--since",
        type=since,
        metavar="WHEN",
        help="only spans that ended since WHEN: 30m, 2h, 7d ago, or an ISO 8601 time",
    )
    trace.add_argument(
        "--content",
        action="store_true",
        help="put messages, arguments and results on the spans (what the log still holds)",
    )


def add_prune_flags(cmd: argparse.ArgumentParser) -> None:
    """The flags of ``plait prune``."""
    cmd.add_argument(
        "--closed-before",
        type=since,
        metavar="DATE",
        help="sessions closed before DATE (2026-01-01, or 30d: that long ago)",
    )
    cmd.add_argument(
        "--idle-before",
        type=since,
        metavar="DATE",
        help="sessions, closed or not, whose last event is before DATE; never one a live "
        "process owns",
    )
    cmd.add_argument("--dry-run", action="store_true", help="list what would go; change nothing")
