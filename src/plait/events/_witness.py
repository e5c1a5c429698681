"""A witness: the latest signed head of each session, kept outside the store
(docs/event-log.md#the-witness).

Whoever can write the store can cut a session back to an earlier signed head and set its head
to match: every signature left still verifies. The witness is an append-only file of JSON
lines, one per signed head the writer recorded, written once the head is durable; ``verify``
then asks that the latest head it holds of a session is in the session's log. A line holds
only what the log's ``HeadSigned`` holds (the stream, the seq and hash of the head, the key's
fingerprint, the signature) and when: never a byte of the key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated

import msgspec

from plait._errors import WitnessError

__all__ = ["Witness", "WitnessHead", "encode_line", "latest", "parse_witness"]


class WitnessHead(msgspec.Struct, frozen=True):
    """One line of a witness: a session's head signed at ``seq``."""

    stream: str
    """The session."""
    seq: int
    """The seq of the head signed (the ``HeadSigned`` that signs it is at ``seq + 1``)."""
    head_hash: bytes
    """That event's hash."""
    fingerprint: str
    """The signing key's fingerprint."""
    signature: bytes
    """The Ed25519 signature of the head's message (``plait.events._signing.head_message``)."""
    at: datetime
    """When the head was signed (the ``HeadSigned``'s time)."""
    source: str = ""
    """The file (or bundle member) the line was read from, for messages."""
    line: int = 0
    """Its line number there, from 1."""


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    """A witness line as written: bytes as hex, the time as ISO 8601."""

    stream: str
    seq: Annotated[int, msgspec.Meta(ge=1)]
    head_hash: str
    fingerprint: str
    signature: str
    at: Annotated[datetime, msgspec.Meta(tz=True)]


_decode = msgspec.json.Decoder(_Line).decode


def parse_witness(data: bytes, source: str, stream: str | None = None) -> list[WitnessHead]:
    """The lines of a witness file's ``data`` (of ``stream`` only, if given), in file order;
    ``source`` names it in errors. A line that is not a witness line is a ``WitnessError``
    naming ``source`` and the line's number."""
    heads = []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    for number, text in enumerate(lines, 1):
        try:
            line = _decode(text)
            head_hash, signature = bytes.fromhex(line.head_hash), bytes.fromhex(line.signature)
        except (msgspec.DecodeError, ValueError) as exc:
            raise WitnessError(
                f"witness {source} line {number}: not a witness line: {exc}"
            ) from None
        if stream is None or line.stream == stream:
            heads.append(
                WitnessHead(
                    line.stream,
                    line.seq,
                    head_hash,
                    line.fingerprint,
                    signature,
                    line.at,
                    source,
                    number,
                )
            )
    return heads


def encode_line(head: WitnessHead) -> bytes:
    """``head`` as a line of a witness file, newline included."""
    line = {
        "stream": head.stream,
        "seq": head.seq,
        "head_hash": head.head_hash.hex(),
        "fingerprint": head.fingerprint,
        "signature": head.signature.hex(),
        "at": head.at.isoformat(),
    }
    return msgspec.json.encode(line) + b"\n"


def latest(lines: Iterable[WitnessHead]) -> dict[str, WitnessHead]:
    """Each stream's line of the highest seq (the first such, if it is there twice): not the
    last line, so a line appended again later cannot take a session's witness back."""
    heads: dict[str, WitnessHead] = {}
    for line in lines:
        held = heads.get(line.stream)
        if held is None or line.seq > held.seq:
            heads[line.stream] = line
    return heads


@dataclass(frozen=True)
class Witness:
    """The witness file at ``path``: appended to by the writer of signed sessions, read by
    ``verify``."""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    def record(
        self,
        stream: str,
        seq: int,
        head_hash: bytes,
        fingerprint: str,
        signature: bytes,
        at: datetime,
    ) -> None:
        """Append the line of ``stream``'s head signed at ``seq``, and return once it is on
        disk (one ``write``, then ``fsync``; a new file's directory too). Raise
        ``WitnessError`` naming the file if it cannot be written."""
        data = encode_line(WitnessHead(stream, seq, head_hash, fingerprint, signature, at))
        try:
            new = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if new:
                    os.fchmod(fd, 0o644)  # as documented, whatever the umask
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(f"wrote {written} of {len(data)} bytes")
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:
                _sync_directory(self.path.parent)
        except OSError as exc:
            raise WitnessError(f"witness {self.path}: {exc.strerror or exc}") from None

    def lines(self, stream: str | None = None) -> list[WitnessHead]:
        """Every line (of ``stream`` only, if given), in file order."""
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            raise WitnessError(f"witness {self.path}: {exc.strerror or exc}") from None
        return parse_witness(data, str(self.path), stream)

    def heads(self, stream: str | None = None) -> dict[str, WitnessHead]:
        """Each session's latest signed head (``stream``'s only, if given): the line of the
        highest seq, wherever it is in the file."""
        return latest(self.lines(stream))


def _sync_directory(path: Path) -> None:
    """Make a new file's name durable: ``fsync`` the directory that holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
