"""``plait prune``: remove whole sessions closed, or idle, before a date, keeping the proof
that the store is still whole (docs/storage.md#retention)."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from plait.cli import _output as render
from plait.cli._common import config_of, err, out, store_of
from plait.cli._du import size
from plait.cli._words import count

__all__ = ["cmd_prune"]


def cmd_prune(args: argparse.Namespace) -> int:
    """Remove whole sessions closed (or idle) before a date (``plait prune``)."""
    from plait.events import prune

    if args.closed_before is None and args.idle_before is None:
        err("plait: prune: name what goes: --closed-before DATE, --idle-before DATE, or both")
        return 2
    config = config_of(args, mcp_servers=False)
    with store_of(config, create=False) as store:
        report = prune(
            store,
            closed_before=args.closed_before,
            idle_before=args.idle_before,
            dry_run=args.dry_run,
        )
    if args.json:
        out(render.json_line(_fields(report)))
        return 0
    verb = "would prune" if report.dry_run else "pruned"
    for record in report.pruned:
        closed = record.closed_at or record.last_at
        what = "closed" if record.closed_at is not None else "last event"
        out(
            f"{verb} {record.stream[:8]}  {what} {closed.isoformat(timespec='seconds')}  "
            f"{count(record.events, 'event')}  {size(record.freed)}"
        )
    for kept in report.kept:
        out(f"kept {kept.session_id[:8]}: {kept.reason}")
    shared = f", {report.shared_blobs} kept (shared)" if report.shared_blobs else ""
    out(
        f"{verb} {count(len(report.pruned), 'session')} ({count(report.events, 'event')}, "
        f"{count(report.blobs, 'blob')}{shared}; about {size(report.freed)}) by "
        f"{report.rule or 'no rule'}"
    )
    if report.dry_run:
        out("dry run: nothing changed")
    elif report.pruned:
        room = f"store: {size(report.bytes_before)} before, {size(report.bytes_after)} after"
        out(f"{room}; run `{report.vacuum}` to give the rest back" if report.vacuum else room)
    return 0


def _fields(report: Any) -> dict[str, Any]:
    """``report`` as one JSON object, hashes in hex."""
    fields: dict[str, Any] = msgspec.to_builtins(report)
    for record, original in zip(fields["pruned"], report.pruned, strict=True):
        record["last_hash"] = original.last_hash.hex()
        record["signed_hash"] = original.signed_hash.hex()
    return fields
