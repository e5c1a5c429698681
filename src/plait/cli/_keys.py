"""Signing keys on the command line: ``plait keygen``, and what ``plait verify`` says of a
session's signed heads (docs/event-log.md#signed-heads)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from plait.cli._common import out

if TYPE_CHECKING:
    from plait.events import PublicKey, Signatures, Verification, Witness

__all__ = ["cmd_keygen", "misused", "proof_failed", "proof_of", "signed_line"]


def cmd_keygen(args: argparse.Namespace) -> int:
    """Make an Ed25519 signing key (``plait keygen``)."""
    from plait.events import generate_key

    fingerprint = generate_key(args.out)
    out(f"wrote {args.out} (private, mode 600) and {args.out}.pub; fingerprint {fingerprint[:16]}")
    return 0


def misused(
    session: str | None, bundle: str | None, public_key: str | None, witness: str | None
) -> str | None:
    """What is wrong with ``plait verify``'s arguments together, if anything (a usage error:
    exit 2): a session and a bundle, or neither; a bundle or a witness named that is not
    there; a witness named without a key to check its lines with."""
    if (session is None) == (bundle is None):
        return "plait verify takes a SESSION or --bundle FILE: one of them"
    if bundle is not None and not Path(bundle).is_file():
        return f"bundle {bundle}: no such file"
    if witness is not None and public_key is None:
        return "--witness needs --public-key: the witness's lines are checked with it"
    if witness is not None and not Path(witness).is_file():
        return f"witness {witness}: no such file"
    return None


def proof_of(
    public_key: str | None, witness: str | None
) -> tuple[PublicKey | None, Witness | None, str]:
    """The key and witness ``plait verify`` checks with: the public key at ``public_key``, and
    the witness at ``witness``, by default ``X.heads`` beside ``X.pub`` when it is there; and
    what the ok line says when it is not (``misused`` checked them)."""
    from plait.events import PublicKey, Witness

    if public_key is None:
        return None, None, ""
    key = PublicKey.from_file(public_key)
    if witness is not None:
        return key, Witness(witness), ""
    beside = Path(f"{public_key.removesuffix('.pub')}.heads")
    if beside.is_file():
        return key, Witness(beside), ""
    return key, None, f"no witness at {beside}: truncation to an earlier signed head is not checked"


def proof_failed(report: Verification) -> bool:
    """Whether ``report`` failed on its proof (a signed head, the witness, or no signed head
    with a key given), not on its chain."""
    return report.signatures is not None and not report.signatures.ok


def signed_line(report: Signatures, missing_witness: str = "") -> str:
    """What ``plait verify`` adds to its ``ok`` line about the signed heads and the witness."""
    keys = ", ".join(f[:16] for f in report.fingerprints)
    if not report.checked:
        return f"signed by {keys}, unchecked (give --public-key)"
    tail = f"; {report.unsigned} events after it unsigned" if report.unsigned else ""
    if report.copied:  # a fork's: they sign its source's chain (plait verify SOURCE checks them)
        tail += f"; {report.copied} copied from {report.copied_from} (verify it for them)"
    if report.witness_seq is not None:
        tail += f"; witness {report.witness}: its last head, seq {report.witness_seq}, is the log's"
    elif report.witness:
        tail += f"; witness {report.witness} holds no head of this session"
    elif missing_witness:
        tail += f"; {missing_witness}"
    last = report.last_signed_seq
    own = report.signed - report.copied
    return f"{own} signed heads by {keys} checked, the last at seq {last}{tail}"
