"""``SqliteStore``'s small content: kept in the row of the append that made it, not in
``blobs`` (docs/storage.md#one-row-per-append).

A blob of at most ``INLINE_MAX`` bytes made by an append (a prompt, a reply, a short tool
output: content a session may be asked to erase) goes in its row's ``content``: the msgpack
array of its items, compressed as rows are (``plait.events._packing.compressed``) where that
makes it smaller. An item is a blob whole, or a blob that begins with its row's stream id (as
a blob scoped to its session does, docs/storage.md#erasure) without it, or, for a blob deleted
(expired, erased), its sha-256: a tombstone. ``contents`` finds a blob's row by the first 4
bytes of its sha-256. The events' hashes do not cover
``content``, so deleting content leaves the chain as it was, as deleting a row of ``blobs``
does.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence

import msgspec

from plait.events._blobstore import REDACTED, RedactedMarker
from plait.events._packing import compressed, decompressed, is_packed
from plait.events.stores._sqlite_schema import Query

__all__ = ["INLINE_MAX", "Blobs", "delete", "find", "pack_content", "split", "unpack", "write"]

INLINE_MAX = 4096
"""Bytes at most of a blob kept in its append's row."""

Blobs = Sequence[bytes | tuple[bytes]]
"""A row's blobs, in the order it keeps them: each a blob's bytes, or the 1-tuple of the
sha-256 of one deleted."""


class _Whole(msgspec.Struct, frozen=True, array_like=True, tag=0):
    data: bytes


class _Scoped(msgspec.Struct, frozen=True, array_like=True, tag=1):
    rest: bytes
    """The blob's bytes after its row's stream id, which it begins with."""


class _Deleted(msgspec.Struct, frozen=True, array_like=True, tag=2):
    sha256: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[_Whole | _Scoped | _Deleted]).decode

_FIND_SQL = (
    "SELECT a.position, n.name, a.content FROM contents AS c "
    "JOIN appends AS a ON a.position = c.position JOIN names AS n ON n.key = a.stream "
    "WHERE c.key = ? ORDER BY a.position"
)


def key(sha256: str) -> int:
    """The key in ``contents`` of a blob of that (hex) sha-256."""
    return int.from_bytes(bytes.fromhex(sha256[:8]), "big", signed=True)


def split(blobs: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """``blobs`` of an append: those for ``blobs``, and those kept in its row."""
    small = {sha: data for sha, data in blobs.items() if len(data) <= INLINE_MAX}
    return {sha: data for sha, data in blobs.items() if sha not in small}, small


def pack_content(stream: str, blobs: Blobs) -> bytes:
    """The ``content`` of a row of ``stream`` that keeps ``blobs``."""
    scope = stream.encode()
    items = [
        _Deleted(blob[0])
        if isinstance(blob, tuple)
        else _Scoped(blob[len(scope) :])
        if blob.startswith(scope)
        else _Whole(blob)
        for blob in blobs
    ]
    plain = _encode(items)
    packed = compressed(plain)
    return packed if len(packed) < len(plain) else plain


def unpack(stream: str, content: bytes) -> list[bytes | tuple[bytes]]:
    """The blobs of the ``content`` of a row of ``stream``; raise ``ValueError`` if it holds
    none."""
    plain = decompressed(content) if is_packed(content) else content
    try:
        items = _decode(plain)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    scope = stream.encode()
    return [
        (item.sha256,)
        if isinstance(item, _Deleted)
        else scope + item.rest
        if isinstance(item, _Scoped)
        else item.data
        for item in items
    ]


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
    for _, stream, content in query(_FIND_SQL, (key(sha256),)):
        if content is None:
            continue
        try:
            blobs = unpack(stream, content)
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
    for position, stream, content in db.execute(_FIND_SQL, (key(sha256),)).fetchall():
        if content is None:
            continue
        blobs = unpack(stream, content)
        kept = [
            (digest,) if not isinstance(b, tuple) and hashlib.sha256(b).digest() == digest else b
            for b in blobs
        ]
        if kept != blobs:
            deleted = True
            db.execute(
                "UPDATE appends SET content = ? WHERE position = ?",
                (pack_content(stream, kept), position),
            )
    return deleted
