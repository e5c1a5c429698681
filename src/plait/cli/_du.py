"""``plait du``: what the store and each session's log take
(docs/storage.md#storage-you-can-see)."""

from __future__ import annotations

import argparse

import msgspec

from plait.cli import _output as render
from plait.cli._common import existing_store, find_session, out

__all__ = ["cmd_du", "size"]


def size(count: int | None) -> str:
    """``count`` bytes for people: ``812 B``, ``41.3 KB``, ``2.1 MB``."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def cmd_du(args: argparse.Namespace) -> int:
    """Show what the store takes and each session's share (``plait du``)."""
    from plait.events import usage

    with existing_store(args, read_only=True) as store:
        sessions = [find_session(store, s) for s in args.session] or None
        found = usage(store, sessions)
        space = store.space()
    if args.json:
        for row in found:
            out(render.json_line(msgspec.to_builtins(row)))
        out(render.json_line({"store": msgspec.to_builtins(space)}))
        return 0
    out(f"{'session':<10} {'events':>7} {'log':>10} {'blobs':>6} {'blob bytes':>11} {'shared':>7}")
    for row in found:
        out(
            f"{row.session_id[:8]:<10} {row.events:>7} {size(row.bytes):>10} {row.blobs:>6}"
            f" {size(row.blob_bytes):>11} {row.shared_blobs:>7}"
        )
    if len(found) == 1:
        out("")
        out(f"{'type':<26} {'events':>7} {'bytes':>10} {'per event':>10}")
        for kind in found[0].by_type:
            each = kind.bytes // max(kind.events, 1)
            out(f"{kind.type:<26} {kind.events:>7} {size(kind.bytes):>10} {size(each):>10}")
    out("")
    if space.total is None:
        out("store: in memory")
    else:
        back = f"; {size(space.reclaimable)} free, which `{space.vacuum}` gives back"
        out(f"store: {size(space.total)}{back if space.reclaimable else ''}")
    return 0
