"""How ``SqliteStore`` reads its whole log fast (``batches``, ``iter_all``: a rebuild).

Read one row per event, and each costs a tuple, two bytes objects and an int to make, and a
decode call of its own. Instead one statement returns a chunk of events as one row: their
positions and sizes, their stored bytes end to end (``group_concat`` over the rows in position
order), their hashes end to end, whether any may hold a blob reference, how many are of an
old version, and their columns. A batch of them decodes as one msgpack array
(``decode_joined``, which checks each event's bytes against its hash) just before the caller
folds it, once its columns are seen to say what its events say (``columns_agree``).

SQLite computes that row with the GIL released, so a thread of its own reads the next chunk
while the caller decodes and folds this one: the reading runs on the other core. A chunk that
holds an old version, or whose positions do not follow each other from where it starts, is read
the careful way, row by row through ``decode_rows``, which lifts old versions; so is a batch
whose bytes do not decode as current ``Event``s or disagree with their columns, and the careful
path names what is wrong there.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from itertools import accumulate

import msgspec

from plait.events.checks import Columns, columns_agree
from plait.events.codec import BLOB_MARK, CURRENT_VERSIONS, decode_joined
from plait.events.types import Event

__all__ = ["CHUNK_SQL", "KEYED_CHUNK_SQL", "Chunk", "batches"]

_OLD = " ".join(
    f"WHEN '{name}' THEN {version}" for name, version in CURRENT_VERSIONS.items() if version != 1
)

CHUNK_SQL = (
    "SELECT count(*), max(position), '[' || group_concat(position) || ']', "
    "'[' || group_concat(length(data)) || ']', "
    "CAST(group_concat(data, X'') AS BLOB), CAST(group_concat(hash, X'') AS BLOB), "
    f"max(instr(data, X'{BLOB_MARK.hex()}')), sum(v != CASE type {_OLD} ELSE 1 END), "
    "json_group_array(CAST(stream AS TEXT)), '[' || group_concat(seq) || ']', "
    "json_group_array(CAST(type AS TEXT)), '[' || group_concat(v) || ']' "
    "FROM (SELECT position, data, hash, stream, seq, type, v FROM events "
    "WHERE position > ? ORDER BY position LIMIT ?)"
)
"""A chunk of events after a position: how many, the last position, their positions and
sizes (JSON arrays, in the order of the bytes), their stored bytes, their hashes, (above 0)
whether any of them may hold a blob reference, how many are not of their type's current
version (by the ``type`` and ``v`` columns), and their ``stream``, ``seq``, ``type`` and
``v`` columns (JSON arrays), to be checked against what their bytes say."""

KEYED_CHUNK_SQL = (
    "SELECT count(*), max(position), '[' || group_concat(position) || ']', "
    "'[' || group_concat(length(data)) || ']', "
    "CAST(group_concat(data, X'') AS BLOB), CAST(group_concat(hash, X'') AS BLOB), "
    f"max(instr(data, X'{BLOB_MARK.hex()}')), NULL, "
    "'[' || group_concat(stream) || ']', '[' || group_concat(seq) || ']', "
    "'[' || group_concat(type) || ']', '[' || group_concat(v) || ']' "
    "FROM (SELECT position, data, hash, stream, seq, type, v FROM log "
    "WHERE position > ? ORDER BY position LIMIT ?)"
)
"""``CHUNK_SQL`` of layout 3: the streams and types as their keys in ``names``, which
``batches`` looks up (a join in SQL costs the reading thread more than the lookup costs the
folding one), and no count of old versions, which it makes from the names."""

Chunk = tuple[
    int,
    int | None,
    str | None,
    str | None,
    bytes | None,
    bytes | None,
    int | None,
    int | None,
    str,
    str | None,
    str,
    str | None,
]
"""What ``CHUNK_SQL`` returns: a count of 0 and ``None``s after the last event."""

_ints = msgspec.json.Decoder(list[int]).decode
_columns = msgspec.json.Decoder(tuple[list[str], list[int], list[str], list[int]]).decode
_keyed_columns = msgspec.json.Decoder(tuple[list[int], list[int], list[int], list[int]]).decode

_CHUNK = 16_384
"""Events per chunk read ahead: enough that the reader seldom waits for the GIL."""

_AHEAD = 2
"""Chunks read ahead at most."""

READ_AHEAD = True
"""Read chunks on a thread of their own (else on the caller's, between its batches)."""


def batches(
    read_chunk: Callable[[int, int], Chunk],
    read_rows: Callable[[int, int], list[Event]],
    resolve: Callable[[Event], Event] | None,
    after_position: int,
    batch: int,
    names: Callable[[set[int]], dict[int, str]] | None = None,
) -> Iterator[list[Event]]:
    """Yield every event after ``after_position`` in lists of up to ``batch``.

    ``read_chunk(after, limit)`` runs ``CHUNK_SQL`` (``KEYED_CHUNK_SQL`` given ``names``,
    which returns layout 3's ``names`` by key, read again when it lacks one of those asked);
    ``read_rows(after, limit)`` reads and decodes rows the careful way; ``resolve`` brings
    back the blobs of an event that may reference some.
    """
    size = max(batch, _CHUNK // batch * batch)
    chunks = _chunks(read_chunk, after_position, size)
    if READ_AHEAD:
        chunks = _ahead(chunks)
    try:
        after = after_position
        while True:
            chunk = next(chunks, None)
            if chunk is None:
                return
            count, _, listed, sizes, data, hashes, blobs, old, *columns = chunk
            if not count or listed is None or sizes is None or data is None or hashes is None:
                return
            positions = _ints(listed)
            if names is None:
                said = _said(columns)
            else:
                said, old = _named(columns, names)
            dense = positions == list(range(after + 1, after + 1 + len(positions)))
            if old or said is None or not dense:
                rows = read_rows(after, len(positions))  # it names what is wrong, if anything
                yield from (rows[i : i + batch] for i in range(0, len(rows), batch))
            else:
                ends = [0, *accumulate(_ints(sizes))]
                view = memoryview(data)
                for i in range(0, len(positions), batch):
                    j = min(i + batch, len(positions))
                    start = ends[i]
                    found = decode_joined(
                        view[start : ends[j]],
                        positions[i:j],
                        hashes[32 * i : 32 * j],
                        [end - start for end in ends[i : j + 1]],
                        said[0][i:j],
                    )
                    if found is None or not columns_agree(found, _sliced(said, i, j)):
                        yield read_rows(positions[i - 1] if i else after, j - i)
                    elif resolve is not None and blobs:
                        yield [resolve(e) if e.body.BLOB_FIELDS else e for e in found]
                    else:
                        yield found
            if len(positions) < size:
                return
            after = positions[-1]
    finally:
        chunks.close()


def _said(columns: list[str | None]) -> Columns | None:
    """A chunk's JSON arrays of columns, or ``None`` if one does not hold what it should (a
    column of another type than it is declared: the careful path says where)."""
    try:
        return _columns(_array(columns))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _named(
    columns: list[str | None], names: Callable[[set[int]], dict[int, str]]
) -> tuple[Columns | None, int]:
    """A layout 3 chunk's columns, its keys named (``None`` if one is not a key of
    ``names``: the careful path, which reads the rows through the ``events`` view, says what
    is wrong), and how many are not of their type's current version."""
    try:
        streams, seqs, types, versions = _keyed_columns(_array(columns))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, 0
    keys = {*streams, *types}
    known = names(keys)
    if not known.keys() >= keys:
        return None, 0
    types_named = [known[key] for key in types]
    current = CURRENT_VERSIONS
    old = sum(v != current.get(t, 1) for t, v in zip(types_named, versions, strict=True))
    return ([known[key] for key in streams], seqs, types_named, versions), old


def _array(columns: list[str | None]) -> bytes:
    """A chunk's JSON arrays of columns as one JSON array, to decode in one call."""
    return b"[" + ",".join(c or "null" for c in columns).encode() + b"]"


def _sliced(columns: Columns, i: int, j: int) -> Columns:
    streams, seqs, types, versions = columns
    return streams[i:j], seqs[i:j], types[i:j], versions[i:j]


def _chunks(
    read_chunk: Callable[[int, int], Chunk], after: int, size: int
) -> Generator[Chunk, None, None]:
    while True:
        chunk = read_chunk(after, size)
        yield chunk
        count, last = chunk[0], chunk[1]
        if count < size or last is None:
            return
        after = last


def _ahead(chunks: Iterator[Chunk]) -> Generator[Chunk, None, None]:
    """Run ``chunks`` on a thread of its own, ``_AHEAD`` chunks ahead of the caller."""
    ahead: queue.Queue[Chunk | BaseException | None] = queue.Queue(_AHEAD)
    stop = threading.Event()

    def read() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    return
                ahead.put(chunk)
            ahead.put(None)
        except BaseException as exc:  # the caller raises it
            ahead.put(exc)

    reader = threading.Thread(target=read, name="plait-sqlite-reader", daemon=True)
    reader.start()
    try:
        while (chunk := ahead.get()) is not None:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
    finally:
        stop.set()
        while reader.is_alive():  # a reader waiting to hand over a chunk takes its turn
            try:
                ahead.get_nowait()
            except queue.Empty:
                reader.join(0.01)
