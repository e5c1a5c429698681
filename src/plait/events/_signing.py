"""Signed heads: Ed25519 signatures over a session's chain head (docs/event-log.md#signed-heads).

A session written with a ``Signer`` records ``HeadSigned`` after each group that ends a task or
closes the session, and after any group once ``SIGN_EVERY`` events were recorded unsigned;
``verify_signatures`` checks them against a public key. The private key never reaches the
store, an event, an error or a log line: plait only calls ``Signer.sign``, which a KMS or HSM
may answer. The ``cryptography`` package is imported only here, and only
when a key is read, made or checked, so commands that sign nothing do not pay for it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import msgspec

from plait._errors import KeyFileError, WitnessError
from plait.events._types import (
    Body,
    ContentErased,
    Event,
    HeadSigned,
    SessionClosed,
    SessionStarted,
    TaskCompleted,
    TurnAborted,
)
from plait.events._witness import Witness

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "HEAD_DOMAIN",
    "SIGN_EVERY",
    "HeadCheck",
    "PublicKey",
    "Signatures",
    "Signer",
    "ends_task",
    "fingerprint_of",
    "generate_key",
    "head_message",
    "last_done",
    "verify_signatures",
]

log = logging.getLogger("plait")

HEAD_DOMAIN = b"plait-head-v1\0"
"""What every signed message starts with, so a signature over a head is good for nothing else."""

SIGN_EVERY = 64
"""Events recorded since the last signed head after which the next group is signed too, task
end or not: a long task with many tool calls is covered within 64 events, not only once it
ends. One Ed25519 signature (about 50 µs) per 64 events costs nothing measurable."""

_ENDS = (TaskCompleted, TurnAborted, SessionClosed)


def head_message(stream: str, seq: int, head_hash: bytes, fingerprint: str) -> bytes:
    """The bytes signed for the head ``seq`` (hash ``head_hash``) of ``stream``."""
    return b"".join(
        (
            HEAD_DOMAIN,
            stream.encode(),
            b"\0",
            seq.to_bytes(8, "big"),
            head_hash,
            fingerprint.encode(),
        )
    )


def fingerprint_of(raw_public_key: bytes) -> str:
    """A key's fingerprint: the sha-256 of its raw 32-byte public key, hex."""
    return hashlib.sha256(raw_public_key).hexdigest()


def last_done(events: Sequence[Event]) -> Event:
    """The last of ``events`` (not empty) that is not a signed head: what the session last did,
    as a session written without a key would end (a close, say)."""
    for event in reversed(events):
        if not isinstance(event.body, HeadSigned):
            return event
    return events[-1]


def ends_task(bodies: Sequence[Body]) -> bool:
    """Whether a recorded group ends a task or closes the session: a head to sign follows it.
    (A hand-back, a drain and a failure end their task with ``TurnAborted``.)"""
    return any(isinstance(body, _ENDS) for body in bodies)


@dataclass(frozen=True)
class Signer:
    """Signs a session's heads: ``sign(message) -> signature`` (Ed25519, 64 bytes) with the key
    whose fingerprint is ``fingerprint``. A KMS or HSM may be behind ``sign``. Each head signed
    is written to ``witness`` too, once durable (docs/event-log.md#the-witness); none: only
    to the log."""

    fingerprint: str
    sign: Callable[[bytes], bytes] = field(repr=False)
    witness: Witness | None = None

    @classmethod
    def from_key_file(cls, path: str | Path, *, witness: Witness | None = None) -> Signer:
        """Sign with the Ed25519 private key in the PEM file at ``path`` (``plait keygen``);
        witness the heads in ``witness``, by default the file ``PATH.heads`` beside the key."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        data = _read(path, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            key = None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"signing key {path}: not an Ed25519 private key in PEM")
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(fingerprint_of(raw), key.sign, witness or Witness(f"{path}.heads"))

    def witnessed(self, head: Event) -> None:
        """Write ``head``, a ``HeadSigned`` event now durable in the log, to the witness (if
        there is one). A witness that cannot be written is one warning: the session goes on,
        and its next head is written to it again (docs/event-log.md#the-witness)."""
        body = head.body
        if self.witness is None or not isinstance(body, HeadSigned):
            return
        try:
            self.witness.record(
                head.stream, body.seq, body.head_hash, body.fingerprint, body.signature, head.at
            )
        except WitnessError as exc:
            log.warning(
                "session %s seq %d: signed head not witnessed: %s", head.stream, head.seq, exc
            )

    def head(self, stream: str, seq: int, head_hash: bytes) -> HeadSigned:
        """The ``HeadSigned`` for the head ``seq`` of ``stream``, whose hash is ``head_hash``."""
        message = head_message(stream, seq, head_hash, self.fingerprint)
        return HeadSigned(seq, head_hash, self.fingerprint, self.sign(message))


@dataclass(frozen=True)
class PublicKey:
    """A public key to check signed heads with (``PATH.pub`` of ``plait keygen``)."""

    key: Ed25519PublicKey
    fingerprint: str

    @classmethod
    def from_file(cls, path: str | Path) -> PublicKey:
        """Read the Ed25519 public key in the PEM file at ``path``."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        data = _read(path, "public key")
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError):
            key = None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"public key {path}: not an Ed25519 public key in PEM")
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return cls(key, fingerprint_of(raw))

    def signed(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's over ``message``."""
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


def generate_key(out: str | Path) -> str:
    """Write a new Ed25519 private key at ``out`` (PEM, mode 0600) and its public key at
    ``out.pub``; return its fingerprint. Refuse to overwrite either file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path, public = Path(out), Path(f"{out}.pub")
    for existing in (path, public):
        if existing.exists():
            raise KeyFileError(f"{existing} exists: not overwritten (choose another --out)")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_key = key.public_key()
    public_pem = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_new(path, private_pem, 0o600)
    _write_new(public, public_pem, 0o644)
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return fingerprint_of(raw)


class Signatures(msgspec.Struct, frozen=True):
    """What ``verify_signatures`` found in a session's signed heads (and ``verify``, in its
    witness)."""

    ok: bool
    """No signed head is bad, nor the witness's head (with no key given: unchecked, and ok)."""
    signed: int
    """``HeadSigned`` events in the session."""
    fingerprints: list[str] = []
    """The keys that signed them, in order of first use."""
    checked: bool = False
    """Whether they were checked against a public key."""
    last_signed_seq: int = 0
    """The last head signed (0: none)."""
    unsigned: int = 0
    """Events after the last ``HeadSigned`` (all of them in a session never signed); a crash
    can leave some, and a session is written on after its last task's end."""
    first_bad_seq: int | None = None
    """The ``HeadSigned`` that failed, if one did (or where the witness's head is not found)."""
    reason: str = ""
    """Why, for people."""
    copied: int = 0
    """Of ``signed``, those a fork copied from its source: they sign the source's chain, not
    the fork's (its first event names its source), and are checked by verifying the source."""
    copied_from: str | None = None
    """The session a fork's copied heads belong to."""
    own: int = 0
    """Of ``signed``, those over this session's own chain: all but the ``copied``. A fork
    needs one to be proven: the first covers the copy too."""
    witness_seq: int | None = None
    """The seq of the witness's latest head of the session, checked to be in the log
    (docs/event-log.md#the-witness); ``None``: no witness was checked, or it holds no head of
    the session (``witness`` then names it)."""
    witness: str = ""
    """The witness read (a file, or a bundle's lines), if one was."""
    failure: Literal["", "signature", "witness", "unsigned"] = ""
    """What failed: a signed head of the log, the witness's check, or a session checked
    against a key had no signed head (``reason`` says why)."""


def verify_signatures(events: Sequence[Event], public_key: PublicKey | None) -> Signatures:
    """Check each ``HeadSigned`` of ``events`` (a whole session, its chain verified) against
    ``public_key``: its key, the head it names against the chain, its signature. Without a
    key, only say who signed."""
    check = HeadCheck(public_key)
    for event in events:
        check.see(event)
    return check.result()


class HeadCheck:
    """``verify_signatures`` one event at a time, as a walk of a session's chain sees them
    (``see``, in seq order), so that the walk need not keep them; ``result`` then."""

    def __init__(self, public_key: PublicKey | None) -> None:
        self.public_key = public_key
        self.heads: dict[int, HeadSigned] = {}
        """The signed heads seen, by the seq of the ``HeadSigned``."""
        self.last_seq = 0
        """The last event's seq."""
        self._fingerprints: dict[str, None] = {}
        self._last_head = 0  # the last HeadSigned's own seq
        self._previous = b""  # the hash of the event before the one seen
        self.copied_upto = 0
        """A fork's: the seq it was copied up to (its heads up to here are its source's)."""
        self._origin: str | None = None
        self._copied = 0
        self._own = 0  # the last HeadSigned's own seq that signs this stream, not its source
        self._erased: list[int] = []  # the seqs of ContentErased that deleted content
        self._bad: tuple[int, str] | None = None

    def see(self, event: Event) -> None:
        """Check ``event``, the next of the session."""
        body = event.body
        if event.seq == 1 and isinstance(body, SessionStarted) and body.forked_from is not None:
            self.copied_upto, self._origin = body.forked_from.at_seq, body.forked_from.stream
        if isinstance(body, HeadSigned):
            self.heads[event.seq] = body
            self._fingerprints.setdefault(body.fingerprint)
            self._last_head = event.seq
            copied = event.seq <= self.copied_upto
            self._copied += copied
            self._own = self._own if copied else event.seq
            if self.public_key is not None and self._bad is None:
                # A copied head signs its source's chain: its hash cannot be checked here,
                # but its signature must be over the source's name (a session made to say
                # it is a fork has its own heads, which are not).
                signs = self._origin if copied and self._origin is not None else event.stream
                problem = _problem(event, body, self._previous, self.public_key, signs, copied)
                if problem is not None:
                    self._bad = (event.seq, problem)
        elif isinstance(body, ContentErased) and body.blobs:
            self._erased.append(event.seq)
        self._previous, self.last_seq = event.hash, event.seq

    def result(self) -> Signatures:
        """What the signed heads seen say."""
        last = self.heads[self._last_head].seq if self._last_head else 0
        report = Signatures(
            True,
            len(self.heads),
            list(self._fingerprints),
            self.public_key is not None,
            last,
            self.last_seq - (self._own or self._last_head),
            copied=self._copied,
            copied_from=self._origin if self._copied else None,
            own=len(self.heads) - self._copied,
        )
        bad = self._bad
        unsigned = [seq for seq in self._erased if seq > self._own]
        if bad is None and self.public_key is not None and self.heads and unsigned:
            # Content deleted under an erasure the key did not sign: what an insider who
            # deletes content and records why would leave (docs/storage.md#erasure).
            bad = (unsigned[0], "an erasure no signed head covers: content was deleted "
                   "without the signing key")  # fmt: skip
        if bad is None:
            return report
        seq, reason = bad
        return msgspec.structs.replace(
            report, ok=False, first_bad_seq=seq, reason=reason, failure="signature"
        )


def _problem(
    event: Event,
    body: HeadSigned,
    previous: bytes,
    public_key: PublicKey,
    stream: str,
    copied: bool,
) -> str | None:
    """Why ``body``, at ``event``, is not a head of ``stream`` signed by ``public_key`` over
    the event before it (hash ``previous``; not checked for a head a fork ``copied``)."""
    if body.fingerprint != public_key.fingerprint:
        return (
            f"signed by key {body.fingerprint[:16]}, not by the public key given "
            f"({public_key.fingerprint[:16]})"
        )
    if body.seq != event.seq - 1:
        return f"it signs seq {body.seq}, not the event before it"
    message = head_message(stream, body.seq, body.head_hash, body.fingerprint)
    if not public_key.signed(message, body.signature):
        if copied:
            return f"a head the fork says it copied from {stream} is not one of {stream}'s"
        return "the signature does not match what it signs (forged or re-signed)"
    if not copied and previous != body.head_hash:
        return f"the head it signs (seq {body.seq}) is not the log's: events up to it were changed"
    return None


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{what} {path}: {exc.strerror or exc}") from None


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise KeyFileError(f"{path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.chmod(path, mode)  # as asked, whatever the umask
