"""``SqliteStore``'s small content: kept in the row of the append that made it, not in
``blobs`` (docs/storage.md#one-row-per-append).

A blob of at most ``INLINE_MAX`` bytes made by an append (a prompt, a reply, a short tool
output: content a session may be asked to erase) goes in its row's ``content``: the msgpack
array of its blobs, compressed as rows are (``plait.events.packing.compressed``). A blob
deleted (expired, erased) leaves its sha-256 there in its place: a tombstone. ``contents``
finds a blob's row by the first 4 bytes of its sha-256. The events' hashes do not cover
``content``, so deleting content leaves the chain as it was, as deleting a row of ``blobs``
does.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence

import msgspec

from plait.events.blobstore import REDACTED, RedactedMarker
from plait.events.packing import compressed, decompressed
from plait.events.stores.sqlite_schema import Query

__all__ = ["INLINE_MAX", "delete", "find", "pack_content", "split", "unpack", "write"]

INLINE_MAX = 4096
"""Bytes at most of a blob kept in its append's row."""

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[bytes | tuple[bytes]]).decode

_FIND_SQL = (
    "SELECT a.position, a.content FROM contents AS c "
    "JOIN appends AS a ON a.position = c.position WHERE c.key = ? ORDER BY a.position"
)


def key(sha256: str) -> int:
    """The key in ``contents`` of a blob of that (hex) sha-256."""
    return int.from_bytes(bytes.fromhex(sha256[:8]), "big", signed=True)


def split(blobs: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """``blobs`` of an append: those for ``blobs``, and those kept in its row."""
    small = {sha: data for sha, data in blobs.items() if len(data) <= INLINE_MAX}
    return {sha: data for sha, data in blobs.items() if sha not in small}, small


def pack_content(blobs: Sequence[bytes | tuple[bytes]]) -> bytes:
    """A row's ``content``: its blobs (a deleted one as the 1-tuple of its sha-256)."""
    return compressed(_encode(list(blobs)))


def unpack(content: bytes) -> list[bytes | tuple[bytes]]:
    """The blobs of a row's ``content`` (a deleted one as the 1-tuple of its sha-256); raise
    ``ValueError`` if it holds none."""
    try:
        return _decode(decompressed(content))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None


def write(db: sqlite3.Connection, position: int, blobs: dict[str, bytes]) -> None:
    """Make ``contents`` find ``blobs``, kept in the row at ``position``."""
    db.executemany(
        "INSERT OR IGNORE INTO contents (key, position) VALUES (?, ?)",
        [(key(sha), position) for sha in blobs],
    )


def find(query: Query, sha256: str) -> bytes | RedactedMarker | None:
    """The blob of ``sha256`` kept in a row, ``REDACTED`` if it was deleted, ``None`` if no
    row keeps it."""
    digest = bytes.fromhex(sha256)
    for _, content in query(_FIND_SQL, (key(sha256),)):
        if content is None:
            continue
        try:
            blobs = unpack(content)
        except ValueError:
            continue  # damaged: the event that refers to it finds it missing
        for blob in blobs:
            if isinstance(blob, tuple):
                if blob[0] == digest:
                    return REDACTED
            elif hashlib.sha256(blob).digest() == digest:
                return blob
    return None


def delete(db: sqlite3.Connection, sha256: str) -> bool:
    """Delete the blob of ``sha256`` from every row that keeps it, leaving its tombstone;
    return whether one held it."""
    digest = bytes.fromhex(sha256)
    deleted = False
    for position, content in db.execute(_FIND_SQL, (key(sha256),)).fetchall():
        if content is None:
            continue
        blobs = unpack(content)
        kept = [
            (digest,) if not isinstance(b, tuple) and hashlib.sha256(b).digest() == digest else b
            for b in blobs
        ]
        if kept != blobs:
            deleted = True
            db.execute(
                "UPDATE appends SET content = ? WHERE position = ?",
                (pack_content(kept), position),
            )
    return deleted
