"""What ``verify`` checks of a session's proof besides its chain: its signed heads, and the
witness's latest head of it (docs/event-log.md#the-witness).

``Proof`` is handed to the chain's walk (``plait.events._checks.verify``), sees each event as
the walk decodes it, and once the chain is found intact gives its verdict: the same for a
store's session and for an evidence bundle's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from plait.events._signing import HeadCheck, PublicKey, Signatures, head_message
from plait.events._types import Event
from plait.events._witness import Witness, WitnessHead, latest

if TYPE_CHECKING:
    from plait.events._pruned import PrunedSession
    from plait.events._verification import Verification

__all__ = ["Proof", "failure_line"]

UNSIGNED = "unsigned: no signed head (was the session written with [audit] signing_key?)"
"""What a session with no signed head is, checked against a key."""


def failure_line(report: Signatures) -> str:
    """One line saying what failed in ``report`` (not ok): a signed head, the witness, or
    that there is none to check."""
    if report.failure != "signature":
        return report.reason
    return f"bad signature: seq {report.first_bad_seq}: {report.reason}"


class Proof:
    """The signed heads of ``stream`` checked against ``public_key`` (none: only said who
    signed), and, with a key, the ``witness`` lines of it: each signed by the key, and the
    latest one's head in the log. ``witness_name`` names where the lines came from."""

    def __init__(
        self,
        stream: str,
        public_key: PublicKey | None = None,
        witness: Sequence[WitnessHead] | None = None,
        witness_name: str = "",
    ) -> None:
        self.stream = stream
        self.public_key = public_key
        self._lines = witness
        self._name = witness_name
        self._heads = HeadCheck(public_key)

    @classmethod
    def of(cls, stream: str, public_key: PublicKey | None, witness: Witness | None) -> Proof:
        """``stream``'s proof against ``public_key`` and the lines of it in ``witness`` (read
        now, and only with a key: without one nothing can vouch for them)."""
        if witness is None or public_key is None:
            return cls(stream, public_key)
        return cls(stream, public_key, witness.lines(stream), str(witness.path))

    def see(self, event: Event) -> None:
        """Take ``event``, the next of the stream in the walk."""
        self._heads.see(event)

    def verdict(self, report: Verification) -> Verification:
        """``report``, of a chain found intact, with what its signed heads and the witness
        say; not ok if a signed head or the witness fails, or if a key was given and the
        session has no signed head."""
        signatures = self._heads.result()
        if self._lines is not None:
            signatures = msgspec.structs.replace(signatures, witness=self._name)
        if signatures.ok and self.public_key is not None and self._lines is not None:
            signatures = self._witnessed(signatures, self.public_key, self._lines)
        if signatures.ok and self.public_key is not None and signatures.signed == 0:
            signatures = msgspec.structs.replace(
                signatures, ok=False, reason=UNSIGNED, failure="unsigned"
            )
        elif signatures.ok and self.public_key is not None and not signatures.own:
            # Its copied heads prove its source, not the copy; nothing of its own does.
            reason = (
                f"unsigned: seq 1: the session says it is a fork of {signatures.copied_from} "
                f"up to seq {self._heads.copied_upto}, and no head of its own signs it (the "
                f"{signatures.copied} it copied sign its source's chain); a fork made with "
                "[audit] signing_key set is signed as it is made"
            )
            signatures = msgspec.structs.replace(
                signatures, ok=False, first_bad_seq=1, reason=reason, failure="unsigned"
            )
        report = msgspec.structs.replace(report, signatures=signatures)
        if signatures.ok:
            return report
        bad, line = signatures.first_bad_seq, failure_line(signatures)
        return msgspec.structs.replace(report, ok=False, first_bad_seq=bad, reason=line)

    def pruned(self, report: Verification, record: PrunedSession) -> Verification:
        """``report`` of a session a prune removed (``record``): with a key and a witness,
        the witness's latest head of it must be the signed head (or the head) the record
        kept; else it is flagged (docs/storage.md#retention)."""
        if self.public_key is None or self._lines is None:
            return report
        signatures = Signatures(
            True,
            0,
            checked=True,
            last_signed_seq=record.signed_seq,
            witness=self._name,
        )
        wrong = self._forged(self.public_key, self._lines)
        head = latest(self._lines).get(self.stream)
        if wrong is None and head is not None:
            kept = {(record.signed_seq, record.signed_hash), (record.last_seq, record.last_hash)}
            if (head.seq, head.head_hash) in kept:
                signatures = msgspec.structs.replace(signatures, witness_seq=head.seq)
            else:
                wrong = (
                    f"witness: the witness holds a signed head of seq {head.seq} "
                    f"({head.source} line {head.line}) that the pruned session's record does "
                    f"not: it kept head seq {record.last_seq}, signed head seq "
                    f"{record.signed_seq}"
                )
        if wrong is None:
            return msgspec.structs.replace(report, signatures=signatures)
        signatures = msgspec.structs.replace(signatures, ok=False, reason=wrong, failure="witness")
        return msgspec.structs.replace(report, ok=False, reason=wrong, signatures=signatures)

    def _forged(self, key: PublicKey, lines: Sequence[WitnessHead]) -> str | None:
        """What is wrong with the witness's lines of the stream, if one is not signed by
        ``key``."""
        for line in lines:
            where = f"witness: {line.source} line {line.line} (seq {line.seq})"
            if line.fingerprint != key.fingerprint:
                return (
                    f"{where}: signed by key {line.fingerprint[:16]}, not by the public key "
                    f"given ({key.fingerprint[:16]})"
                )
            message = head_message(self.stream, line.seq, line.head_hash, line.fingerprint)
            if not key.signed(message, line.signature):
                return f"{where}: its signature does not match what it signs (forged)"
        return None

    def _witnessed(
        self, report: Signatures, key: PublicKey, lines: Sequence[WitnessHead]
    ) -> Signatures:
        """``report`` with the witness's check: every line of the stream signed by ``key``,
        and the latest one's head in the log."""

        def fail(seq: int | None, reason: str) -> Signatures:
            return msgspec.structs.replace(
                report, ok=False, first_bad_seq=seq, reason=reason, failure="witness"
            )

        forged = self._forged(key, lines)
        if forged is not None:
            return fail(None, forged)
        head = latest(lines).get(self.stream)
        if head is None:
            return report
        report = msgspec.structs.replace(report, witness_seq=head.seq)
        at, last = head.seq + 1, self._heads.last_seq
        if last < at:
            return fail(
                last + 1,
                f"truncated: the witness holds a signed head at seq {head.seq}, "
                f"the log ends at seq {last}",
            )
        found = self._heads.heads.get(at)
        what = (
            "it is not a signed head"
            if found is None
            else f"it signs seq {found.seq}"
            if found.seq != head.seq
            else f"it signs another hash of seq {head.seq}"
            if found.head_hash != head.head_hash
            else None
        )
        if what is None:
            return report
        return fail(
            at,
            f"witness: seq {at}: the witness holds a signed head at seq {head.seq} "
            f"({head.source} line {head.line}) that the log does not: {what}",
        )
