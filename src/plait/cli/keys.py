"""Signing keys on the command line: ``plait keygen``, and what ``plait verify`` says of a
session's signed heads (docs/event-log.md#signed-heads)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from plait.cli.common import out

if TYPE_CHECKING:
    from plait.events.signing import Signatures
    from plait.events.store import EventStore

__all__ = ["check_signed", "cmd_keygen", "signed_line"]


def cmd_keygen(args: argparse.Namespace) -> int:
    """Make an Ed25519 signing key: the private key at --out (mode 600), the public key at
    --out's path with .pub; set ``[audit] signing_key`` to the first, give ``plait verify
    --public-key`` the second."""
    from plait.events.signing import generate_key

    fingerprint = generate_key(args.out)
    out(f"wrote {args.out} (private, mode 600) and {args.out}.pub; fingerprint {fingerprint[:16]}")
    return 0


def check_signed(store: EventStore, session: str, public_key: str | None) -> Signatures:
    """What the session's signed heads say, checked against the key in ``public_key``."""
    from plait.events.signing import PublicKey, verify_signatures

    key = PublicKey.from_file(public_key) if public_key is not None else None
    return verify_signatures(store.read(session), key)


def signed_line(report: Signatures) -> str:
    """What ``plait verify`` adds to its ``ok`` line about the signed heads, or says instead."""
    if not report.ok:
        return f"bad signature: seq {report.first_bad_seq}: {report.reason}"
    if report.signed == 0:
        return "unsigned: no signed head (was the session written with [audit] signing_key?)"
    keys = ", ".join(f[:16] for f in report.fingerprints)
    if not report.checked:
        return f"signed by {keys}, unchecked (give --public-key)"
    tail = f"; {report.unsigned} events after it unsigned" if report.unsigned else ""
    if report.copied:  # a fork's: they sign its source's chain (plait verify SOURCE checks them)
        tail += f"; {report.copied} copied from {report.copied_from} (verify it for them)"
    last = report.last_signed_seq
    own = report.signed - report.copied
    return f"{own} signed heads by {keys} checked, the last at seq {last}{tail}"
