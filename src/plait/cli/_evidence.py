"""Evidence bundles on the command line: ``plait export`` writes a session's bundle, and
``plait verify --bundle`` checks one anywhere, with no store and no plait.toml
(docs/event-log.md#bundles)."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from plait._errors import BundleError
from plait.cli import _output as render
from plait.cli._common import config_of, err, find_session, out, store_of
from plait.cli._keys import proof_failed, proof_of, signed_line
from plait.cli._words import count

__all__ = ["check_bundle", "cmd_export"]


def cmd_export(args: argparse.Namespace) -> int:
    """Write a session's evidence bundle to one file (``plait export``)."""
    from plait.events import PublicKey, Witness, export_bundle

    config = config_of(args, mcp_servers=False)
    if args.witness is not None and not Path(args.witness).is_file():
        err(f"plait: witness {args.witness}: no such file")
        return 2
    key_file = config.audit.signing_key
    beside = args.public_key and f"{args.public_key.removesuffix('.pub')}.heads"
    path = args.witness or config.audit.witness or (key_file and f"{key_file}.heads") or beside
    witness = Witness(path) if path and Path(path).is_file() else None  # none kept yet: none
    key = PublicKey.from_file(args.public_key) if args.public_key is not None else None
    with store_of(config, create=False, read_only=True) as store:
        session = find_session(store, args.session)
        made = export_bundle(store, session, args.out, witness=witness, public_key=key)
    lines = count(made.witness_lines, "witness line")
    out(
        f"wrote {args.out}: session {session}, {count(made.events, 'event')}, "
        f"{count(made.blobs, 'blob')}, {len(made.redacted)} redacted, {lines}"
        + (f"; checked: {made.checked}" if made.checked else "")
    )
    return 0


def check_bundle(args: argparse.Namespace) -> int:
    """``plait verify --bundle FILE``: check a bundle as a stored session is checked, its
    witness lines (and ``--witness``'s, or those beside the key) included; one line, exit 1
    if anything is edited, missing or damaged."""
    from plait.events import verify_bundle

    key, witness, missing = proof_of(args.public_key, args.witness)
    try:
        report = verify_bundle(args.bundle, key, witness)
    except BundleError as exc:
        out(str(exc))
        return 1
    failed = proof_failed(report)
    if args.json:
        fields = msgspec.to_builtins(report)
        signed = fields.pop("signatures")
        extra = {"signatures": signed} if signed is not None else {}
        session = fields.pop("stream")
        out(render.json_line({"session_id": session, "bundle": args.bundle, **fields, **extra}))
    elif not report.ok and not failed:
        at = "" if report.first_bad_seq is None else f"seq {report.first_bad_seq}: "
        out(f"tampered: {at}{report.reason}")
    elif failed:
        out(report.reason)
    else:
        line = (
            f"ok: bundle {args.bundle}: session {report.stream}, {report.events} events, "
            f"{report.blobs} blobs ({report.redacted} redacted)"
        )
        if report.signatures is not None and report.signatures.signed:
            line += f"; {signed_line(report.signatures, missing)}"
        out(line)
    return 0 if report.ok else 1
