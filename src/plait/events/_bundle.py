"""Evidence bundles: one file that carries a session's log to whoever must check it, with no
store and no plait.toml (docs/event-log.md#bundles).

A bundle is a zip (stdlib ``zipfile``) of the session's rows as the store holds them, byte for
byte (``rows.msgpack``: the stored bytes, their hash and their columns, so every hash is
checked again, not re-made), every blob its events name that the store still holds
(``blobs/SHA256``), the tombstones of those deleted (listed in ``manifest.json``), and the
witness's lines of the session (``witness.jsonl``). ``verify_bundle`` walks it with the very
walk ``EventStore.verify`` makes (``plait.events._checks.verify``), signatures and witness
included; only the store-wide check that positions are dense is left out: a bundle holds one
stream's rows, whose positions are the store's, increasing but not dense.

The zip's comment is a checksum of every byte before it, so a byte changed anywhere, even
where zip itself checks nothing (a member's time), makes the bundle ``damaged``.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Annotated, Any

import msgspec

from plait._errors import BundleError
from plait.events._blobs import blob_refs
from plait.events._checks import Verification, verify
from plait.events._proof import Proof
from plait.events._rows import Row
from plait.events._signing import PublicKey, verify_signatures
from plait.events._store import REDACTED, EventStore, RedactedMarker
from plait.events._stored import PER_APPEND, PER_EVENT, Packed, row_events
from plait.events._witness import Witness, WitnessHead, encode_line, parse_witness

__all__ = ["FORMAT", "Manifest", "export_bundle", "verify_bundle"]

FORMAT = PER_APPEND
"""The latest bundle format, which this plait writes (every store keeps a row per append); it
reads both: 1 holds a row per event, 2 a row per append (``plait.events._stored``)."""

_CHECKSUM = b"plait-bundle sha256:"
_COMMENT = len(_CHECKSUM) + 64  # the zip comment's length: the prefix and a hex sha-256
_WHEN = (1980, 1, 1, 0, 0, 0)  # every member's time: a bundle's bytes are its content's
_ROWS: dict[int, msgspec.msgpack.Decoder[list[Any]]] = {
    PER_EVENT: msgspec.msgpack.Decoder(list[Row]),
    PER_APPEND: msgspec.msgpack.Decoder(list[Packed]),
}
"""The rows of a bundle of each format: its store's layout (``plait.events._stored``)."""


class Manifest(msgspec.Struct, frozen=True):
    """``manifest.json``: what a bundle holds."""

    format: int
    """The bundle format: 1, a row per event; 2, a row per append (``FORMAT``)."""
    session: str
    """The session (stream) it holds."""
    events: int
    """Its events."""
    last_seq: int
    """The stream's head when exported: its last seq..."""
    last_hash: str
    """... and that event's hash, hex."""
    fingerprints: list[str]
    """The keys that signed its heads, in order of first use."""
    plait_version: str
    """The plait that wrote it."""
    created_at: Annotated[datetime, msgspec.Meta(tz=True)]
    """When (the store's clock)."""
    blobs: int
    """Blobs held (``blobs/SHA256``)."""
    redacted: list[str]
    """Blobs its events name whose content was deleted (a tombstone in the store)."""
    witness_lines: int
    """Lines of the witness it holds (``witness.jsonl``)."""
    checked: str = ""
    """What the exporter's own check with its public key said (``""``: none was made)."""


def export_bundle(
    store: EventStore,
    session: str,
    out_path: str | Path,
    *,
    witness: Witness | None = None,
    public_key: PublicKey | None = None,
) -> Manifest:
    """Write the bundle of ``session`` at ``out_path`` (never over an existing file), with
    ``witness``'s lines of it; with ``public_key``, the session is verified first and what
    that said is kept in the manifest (``checked``). Return its manifest."""
    stored = store.as_stored(session)
    rows, (last_seq, last_hash), blob = stored.rows, stored.head, stored.blob
    if not rows:
        raise BundleError(f"session {session}: no events in the store to export")
    # What is there: the verifier checks it.
    events = [e for _, row in row_events(stored.layout, rows, check=False) for e in row]
    held: dict[str, bytes] = {}
    redacted: list[str] = []
    for sha256 in dict.fromkeys(ref.sha256 for e in events for ref in blob_refs(e.body)):
        found = blob(sha256)
        if isinstance(found, bytes):
            held[sha256] = found
        elif found is REDACTED:
            redacted.append(sha256)
    lines = witness.lines(session) if witness is not None else []
    checked = ""
    if public_key is not None:
        report = store.verify(session, public_key=public_key, witness=witness)
        checked = "ok" if report.ok else report.reason
    manifest = Manifest(
        stored.layout,
        session,
        len(events),
        last_seq,
        last_hash.hex(),
        verify_signatures(events, None).fingerprints,
        _version(),
        store.clock(),
        len(held),
        redacted,
        len(lines),
        checked,
    )
    _write(Path(out_path), manifest, rows, held, lines)
    return manifest


def verify_bundle(
    path: str | Path, public_key: PublicKey | None, witness: Witness | None = None
) -> Verification:
    """Check the bundle at ``path`` as ``EventStore.verify`` checks a session: each row's
    hash, columns and link, its blobs, the head; its signed heads against ``public_key``;
    with a key, the witness lines it holds and those of ``witness`` (a file) besides. A
    bundle that is damaged (a byte changed, a member missing) is a ``BundleError``."""
    manifest, rows, blobs, lines = _read(Path(path))
    stream = manifest.session
    if witness is not None:
        lines += witness.lines(stream)
    name = f"bundle {path}" + (f" and {witness.path}" if witness is not None else "")
    # As for a stored session, witness lines are checked with a key, and only then.
    given = lines if public_key is not None and (lines or witness is not None) else None
    proof = Proof(stream, public_key, given, name)
    redacted = set(manifest.redacted)

    def blob(sha256: str) -> bytes | RedactedMarker | None:
        found = blobs.get(sha256)
        return found if found is not None else REDACTED if sha256 in redacted else None

    head = (manifest.last_seq, bytes.fromhex(manifest.last_hash))
    walked = (events for _, events in row_events(manifest.format, rows))
    return verify(stream, walked, blob, lambda: head, proof)


def _write(
    path: Path,
    manifest: Manifest,
    rows: Sequence[Any],
    blobs: dict[str, bytes],
    lines: Iterable[WitnessHead],
) -> None:
    """Write the bundle's file: the zip, then its checksum as the zip's comment."""
    try:
        file = path.open("x+b")
    except FileExistsError:
        raise BundleError(f"{path} exists: not overwritten (choose another file)") from None
    except OSError as exc:
        raise BundleError(f"{path}: {exc.strerror or exc}") from None
    try:
        with file:
            with zipfile.ZipFile(file, "w", zipfile.ZIP_DEFLATED) as bundle:
                _put(bundle, "manifest.json", msgspec.json.encode(manifest))
                _put(bundle, "rows.msgpack", msgspec.msgpack.encode(rows))
                for sha256, data in blobs.items():
                    _put(bundle, f"blobs/{sha256}", data)
                _put(bundle, "witness.jsonl", b"".join(map(encode_line, lines)))
            _seal(file)
            os.fsync(file.fileno())
    except BaseException:
        path.unlink(missing_ok=True)  # no half-written bundle is left to be taken for one
        raise


def _put(bundle: zipfile.ZipFile, name: str, data: bytes) -> None:
    bundle.writestr(zipfile.ZipInfo(name, _WHEN), data, zipfile.ZIP_DEFLATED)


def _seal(file: IO[bytes]) -> None:
    """Make the zip's comment, which is empty, the checksum of all the bytes before it."""
    size = file.seek(0, os.SEEK_END)
    file.seek(size - 2)  # the end record's last field: the comment's length
    file.write(_COMMENT.to_bytes(2, "little"))
    digest = _digest(file, size)
    file.write(_CHECKSUM + digest.encode())


def _digest(file: IO[bytes], size: int) -> str:
    """The sha-256 of the first ``size`` bytes of ``file``, hex."""
    file.seek(0)
    digest = hashlib.sha256()
    left = size
    while left:
        chunk = file.read(min(left, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def _read(path: Path) -> tuple[Manifest, list[Any], dict[str, bytes], list[WitnessHead]]:
    """What the bundle at ``path`` holds, its checksum and every member checked."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(size - _COMMENT, 0))
            comment = file.read()
            if not comment.startswith(_CHECKSUM) or size < _COMMENT:
                raise BundleError(f"bundle {path}: damaged (no plait checksum at its end)")
            if _digest(file, size - _COMMENT).encode() != comment[len(_CHECKSUM) :]:
                raise BundleError(
                    f"bundle {path}: damaged (its checksum does not match its bytes: "
                    "a byte changed)"
                )
            with zipfile.ZipFile(file) as bundle:
                manifest = msgspec.json.decode(bundle.read("manifest.json"), type=Manifest)
                if manifest.format not in _ROWS:
                    raise BundleError(
                        f"bundle {path}: format {manifest.format}; this plait reads "
                        f"{' and '.join(map(str, _ROWS))}"
                    )
                rows = _ROWS[manifest.format].decode(bundle.read("rows.msgpack"))
                blobs = {
                    name.removeprefix("blobs/"): bundle.read(name)
                    for name in bundle.namelist()
                    if name.startswith("blobs/")
                }
                member = f"{path}:witness.jsonl"
                lines = parse_witness(bundle.read("witness.jsonl"), member, manifest.session)
    except FileNotFoundError:
        raise BundleError(f"bundle {path}: no such file") from None
    except (
        zipfile.BadZipFile,
        zlib.error,
        KeyError,
        ValueError,
        EOFError,
        NotImplementedError,
        struct.error,
        msgspec.DecodeError,
    ) as exc:
        raise BundleError(f"bundle {path}: damaged ({exc})") from None
    except OSError as exc:
        raise BundleError(f"bundle {path}: {exc.strerror or exc}") from None
    return manifest, rows, blobs, lines


def _version() -> str:
    """The installed ``plait`` package's version (``unknown`` when it runs uninstalled)."""
    try:
        return version("plait")
    except PackageNotFoundError:
        return "unknown"
