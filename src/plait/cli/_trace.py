"""``plait trace``: recorded sessions as OpenTelemetry GenAI spans, sent to a tracing backend
over OTLP or printed as OTLP JSON (docs/telemetry.md#after-the-fact)."""

from __future__ import annotations

import argparse
import json

import msgspec

from plait._errors import ConfigError
from plait.cli._common import config_of, existing_store, find_session, telemetry_of
from plait.telemetry import Span, export, otlp_json, require_sdk, spans_of

__all__ = ["cmd_trace"]


def cmd_trace(args: argparse.Namespace) -> int:
    """Export recorded sessions as OpenTelemetry spans, or print them (``plait trace``)."""
    settings = telemetry_of(config_of(args, mcp_servers=False), endpoint=args.endpoint)
    if args.content:
        settings = msgspec.structs.replace(settings, content=True)
    if not args.json and settings.traces_endpoint() is None:
        raise ConfigError(
            "plait trace: where to? give --endpoint URL, [telemetry] otlp_endpoint or "
            "OTEL_EXPORTER_OTLP_ENDPOINT, or --json to print the spans"
        )
    problem = settings.unsupported()
    if problem is not None and not args.json:
        raise ConfigError(f"plait trace: {problem}")
    if not args.session and args.since is None:
        raise ConfigError("plait trace: name a session, or give --since to trace every session")
    require_sdk()
    content = settings.with_content()
    spans: list[Span] = []
    counts: list[tuple[str, int]] = []
    with existing_store(args, read_only=True) as store:
        sessions = (
            [find_session(store, s) for s in args.session]
            if args.session
            else [info.stream for info in store.streams()]
        )
        for session in sessions:
            found = spans_of(session, store.read(session), content=content)
            if args.since is not None:
                found = [s for s in found if s.end is not None and s.end >= args.since]
            spans += found
            counts.append((session, len(found)))
    if args.json:
        print(json.dumps(otlp_json(spans, settings), ensure_ascii=False))
        return 0
    export(spans, settings)
    for session, count in counts:
        if count or args.session:
            print(f"{session}: {count} spans sent to {settings.traces_endpoint()}")
    return 0
