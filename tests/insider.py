"""What someone with write access to a store's database can do to a session's log.

This is the insider of docs/event-log.md#signed-heads, with nothing but what that page says of
the storage format: a stream's rows and its head row (``streams``: ``last_seq, last_hash``);
each event's ``prev_hash``, the hash of the event before it (32 zero bytes for seq 1); and what
docs/storage.md says of content kept apart, in ``blobs`` rows (``sha256, size, data``) that an
event names by the sha-256 of their bytes. It reads the rows with plain SQL (``sqlite3`` on the
file, ``psycopg`` on the schema), decodes them (``msgspec``, ``zstandard``), changes what it
likes, then writes the stream back consistently: seqs dense, every hash recomputed, positions
left with no gap (SQLite; in PostgreSQL, kept in order), the head row set. It imports nothing
of plait's: no plait API writes a forgery.

Both stores keep a row per append (layout 5) in ``appends`` (encoding 3,
docs/event-log.md#encoding-3): ``position, stream, seq, count, prev_hash, hash, data``, its
``position`` its first event's (its events' are that plus their index), its ``seq`` its last
event's, ``count`` how many it holds, ``prev_hash`` the hash its first event follows, ``hash``
its last event's. Its ``data`` is one zstd frame (level 3, its content size written, the
dictionary ``src/plait/events/zstd-1.dict``, which the frame names) of its events' entries end
to end: an entry is the msgpack array ``[seq, at, v, body, conversation_id, task_id]`` (plait
writes the last two as nil when empty), and an event's hash is the sha-256 of the msgpack of
its stream, then the hash it follows, then its entry. (A row an earlier layout's event was
moved to, its ``prev_hash`` empty and its ``data`` that event's bytes, is not read: the stores
forged here are written by this plait.)

PostgreSQL's row names its stream; its position is its transaction's id shifted left 20 bits.
SQLite's ``stream`` is the stream's key in ``names (name, key)``; its positions are dense
across the store (a row's first is one past the last of the row before); and its ``content``
keeps the blobs of 4096 bytes at most its append made: a zstd frame as ``data`` is, of the
msgpack array of them, a deleted one as the array of its sha-256. ``contents (key, position)``
finds the row keeping a blob by the first 4 bytes of its sha-256 (a signed integer).

A stream it rewrites is laid out in rows of as many events as its old rows held (any more in
one row after them), each in its old row's place (in PostgreSQL at its old position, any more
right after the last one's events); a row that is as it was keeps its bytes. In SQLite each
keeps its old row's content (those of old rows left over go in the last), and a blob the
insider makes small enough goes in the content of the first row whose events name it.

What it cannot do is sign with the session's key. It can sign with a key of its own
(``AttackerKey``), over the bytes that page describes, and it can edit the witness file of
signed heads (``witness_lines``, ``append_witness_line``) by appending to it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

__all__ = [
    "GENESIS",
    "AttackerKey",
    "Content",
    "Insider",
    "Record",
    "Saved",
    "Sign",
    "append_witness_line",
    "head_message",
    "witness_lines",
]

Record = dict[str, Any]
"""One event as its entry decodes: ``stream``, ``seq``, ``at``, ``v``, ``body`` (a map whose
``type`` names it), ``prev_hash``, ``conversation_id`` and ``task_id`` (``None``: not set)."""

Row = tuple[Any, ...]
"""A row of ``appends``: ``(position, stream, seq, count, prev_hash, hash, data)``, and in
SQLite ``content`` after them, its ``stream`` a key of ``names``."""

Event = tuple[int, str, int, bytes, bytes]
"""One event as a stream's log holds it: seq, type, v, its entry, its hash."""

GENESIS = bytes(32)
"""``prev_hash`` of a stream's first event."""

Sign = Callable[[str, int, bytes], dict[str, Any]]
"""Given a stream, the seq of the head to sign and its hash: the ``HeadSigned`` fields
(``seq``, ``head_hash``, ``fingerprint``, ``signature``) to put in its place."""


Content = str | dict[str, Any]

# --- a row of appends: its entries, of encoding 3 -----------------------------------------------

_ZSTD_DICTIONARY = (
    Path(__file__).resolve().parents[1] / "src/plait/events/zstd-1.dict"
).read_bytes()
"""The dictionary an ``appends`` row's ``data`` (and SQLite's ``content``) is compressed with
(the frame names it)."""

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # how a zstd frame starts
_ENTRY = ("seq", "at", "v", "body", "conversation_id", "task_id")
"""An entry's fields, in order (a reader takes the last two left out as empty)."""
_RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])


@cache
def _zstd() -> tuple[Any, Any]:
    """A compressor and a decompressor of ``appends`` rows."""
    import zstandard

    trained = zstandard.ZstdCompressionDict(
        _ZSTD_DICTIONARY, dict_type=zstandard.DICT_TYPE_FULLDICT
    )
    compressor = zstandard.ZstdCompressor(
        level=3, dict_data=trained, write_content_size=True, write_checksum=False
    )
    return compressor, zstandard.ZstdDecompressor(dict_data=trained)


def _compressed(data: bytes) -> bytes:
    compressed: bytes = _zstd()[0].compress(data)
    return compressed


def _decompressed(data: bytes) -> bytes:
    plain: bytes = _zstd()[1].decompress(data)
    return plain


def _entries(data: bytes, count: int) -> list[bytes]:
    """The ``count`` entries an ``appends`` row's ``data`` holds."""
    assert data[:4] == _ZSTD_MAGIC, "a row of an earlier layout's event, moved whole: not read"
    plain = _decompressed(data)
    return [bytes(raw) for raw in _RAWS.decode(b"\xdd" + count.to_bytes(4, "big") + plain)]


def _entry(record: Record) -> bytes:
    """A ``Record``'s entry, its six fields all there, as plait writes them."""
    return msgspec.msgpack.encode([record.get(name) for name in _ENTRY])


def _chained(stream: str, prev: bytes, entry: bytes) -> bytes:
    """The hash of an entry of ``stream`` that follows the event of hash ``prev``."""
    return hashlib.sha256(msgspec.msgpack.encode(stream) + prev + entry).digest()


def _log(stream: str, rows: list[Row]) -> list[Record]:
    """The events of ``stream``'s rows (in seq order) as ``Record``s."""
    records: list[Record] = []
    last = GENESIS
    for _, _, _, count, prev, digest, data, *_ in rows:
        if prev is None:  # SQLite's: the hash of the row before
            prev = last
        last = digest
        for entry in _entries(data, count):  # each follows the one before, the first the row's
            fields = msgspec.msgpack.decode(entry)
            fields += [None] * (len(_ENTRY) - len(fields))
            records.append(
                {**dict(zip(_ENTRY, fields, strict=True)), "stream": stream, "prev_hash": prev}
            )
            prev = _chained(stream, prev, entry)
    return records


# --- SQLite's content: the small blobs of an append ------------------------------------------

_INLINE_MAX = 4096  # bytes at most of a blob kept in its append's row

Blob = bytes | list[bytes]
"""A blob a row's ``content`` keeps: its bytes, or (deleted) ``[its sha-256]``."""


def _content(stream: str, content: bytes) -> list[Blob]:
    """The blobs a row of ``stream`` keeps in its ``content``: a msgpack array, compressed
    where that made it smaller, of ``[0, bytes]`` (a blob), ``[1, bytes]`` (a blob without
    the stream id it begins with) and ``[2, sha-256]`` (a blob deleted)."""
    plain = _decompressed(content) if content[:4] == _ZSTD_MAGIC else content
    scope = stream.encode()
    blobs: list[Blob] = []
    for tag, data in msgspec.msgpack.decode(plain):
        blobs.append([data] if tag == 2 else scope + data if tag == 1 else data)
    return blobs


def _pack_content(stream: str, blobs: list[Blob]) -> bytes:
    """The ``content`` of a row of ``stream`` keeping ``blobs``."""
    scope = stream.encode()
    items = [
        [2, blob[0]]
        if isinstance(blob, list)
        else [1, blob[len(scope) :]]
        if blob.startswith(scope)
        else [0, blob]
        for blob in blobs
    ]
    plain = msgspec.msgpack.encode(items)
    packed = _compressed(plain)
    return packed if len(packed) < len(plain) else plain


def _digest(blob: Blob) -> bytes:
    """The sha-256 of a blob a row keeps (a deleted one's, as it says)."""
    return blob[0] if isinstance(blob, list) else hashlib.sha256(blob).digest()


def _content_key(digest: bytes) -> int:
    """The key in ``contents`` of a blob of that sha-256: its first 4 bytes, signed."""
    return int.from_bytes(digest[:4], "big", signed=True)


def _named(sha256: str, entry: bytes) -> bool:
    """Whether an entry names the blob of ``sha256`` (as a msgpack string)."""
    return b"\xd9\x40" + sha256.encode() in entry


# --- the insider -------------------------------------------------------------------------------


class Saved(NamedTuple):
    """A store's rows of ``appends``, ``streams``, ``blobs`` and (SQLite) ``contents``, as
    ``Insider.save`` read them."""

    rows: list[Row]
    heads: list[tuple[Any, ...]]
    blobs: list[tuple[Any, ...]]
    contents: list[tuple[Any, ...]]


_COLUMNS = "position, stream, seq, count, prev_hash, hash, data"

_NAME_SQL = "INSERT OR IGNORE INTO names (name, key) SELECT ?, coalesce(max(key), 0) + 1 FROM names"
"""Give a stream id the next key in SQLite's ``names``, as the store does."""

_KEPT_IN_SQL = (
    "SELECT a.position, n.name, a.content FROM contents AS c "
    "JOIN appends AS a ON a.position = c.position JOIN names AS n ON n.key = a.stream "
    "WHERE c.key = ? ORDER BY a.position"
)
"""The rows of SQLite whose content may keep a blob (by its key in ``contents``)."""


class Insider:
    """Raw SQL on one store's tables: read a stream's log, write it back re-chained."""

    def __init__(self, connection: Any, param: str) -> None:
        self._db = connection
        self._p = param
        self._sqlite = param == "?"
        """Whether the store is SQLite's (else PostgreSQL's)."""
        self._columns = _COLUMNS + (", content" if self._sqlite else "")
        self._kept = 0
        """The first rows, as many, are as ``save`` read them (``rewrite`` and
        ``delete_content`` lower it)."""
        self._blobs_changed = False
        self._made: dict[str, bytes] = {}
        """SQLite: the blobs ``with_text`` made small enough to be kept in a row's content,
        by sha-256, until ``rewrite`` puts each in the row of the first event naming it."""

    @classmethod
    @contextmanager
    def sqlite(cls, path: str | Path) -> Iterator[Insider]:
        """On the SQLite file at ``path``."""
        db = sqlite3.connect(path, isolation_level=None)
        try:
            yield cls(db, "?")
        finally:
            db.close()

    @classmethod
    @contextmanager
    def postgres(cls, url: str, schema: str) -> Iterator[Insider]:
        """On the tables in ``schema`` of the PostgreSQL database at ``url``."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f'SET search_path TO "{schema}"')
            db.execute("SET synchronous_commit TO off")  # a forgery need not survive a crash
            yield cls(db, "%s")

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        rows = self._db.execute(sql.replace("?", self._p), params).fetchall()
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]

    @contextmanager
    def _transaction(self) -> Iterator[Callable[[str, tuple[Any, ...]], None]]:
        def execute(sql: str, params: tuple[Any, ...] = ()) -> None:
            self._db.execute(sql.replace("?", self._p), params)

        if self._sqlite:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield execute
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        else:
            with self._db.transaction():
                yield execute

    def _rows(self) -> list[Row]:
        """Every row of ``appends``, in position order."""
        return self._query(f"SELECT {self._columns} FROM appends ORDER BY position")

    @staticmethod
    def _end(rows: list[Row]) -> int:
        """The last position ``rows`` hold (0: none)."""
        return int(rows[-1][0]) + int(rows[-1][3]) - 1 if rows else 0

    def save(self) -> Saved:
        """Every row of ``appends``, ``streams``, ``blobs`` and ``contents``, to ``restore``
        later."""
        rows = self._rows()
        heads = self._query(
            "SELECT stream, last_seq, last_hash, created FROM streams ORDER BY stream"
        )
        blobs = self._query("SELECT sha256, size, data FROM blobs ORDER BY sha256")
        contents: list[tuple[Any, ...]] = []
        if self._sqlite:
            contents = self._query("SELECT key, position FROM contents ORDER BY position, key")
        self._kept, self._blobs_changed, self._made = len(rows), False, {}
        return Saved(rows, heads, blobs, contents)

    def restore(self, saved: Saved) -> None:
        """Put back the rows ``save`` read, as they were (those changed since: by ``rewrite``,
        or a row's content by ``delete_content``)."""
        kept = min(self._kept, len(saved.rows))
        end = self._end(saved.rows[:kept])
        with self._transaction() as execute:
            execute("DELETE FROM appends WHERE position > ?", (end,))
            execute("DELETE FROM streams", ())
            self._insert("appends", self._columns, saved.rows[kept:])
            self._insert("streams", "stream, last_seq, last_hash, created", saved.heads)
            if self._sqlite:
                execute("DELETE FROM contents WHERE position > ?", (end,))
                contents = [kept for kept in saved.contents if kept[1] > end]
                self._insert("contents", "key, position", contents)
            if self._blobs_changed:
                execute("DELETE FROM blobs", ())
                self._insert("blobs", "sha256, size, data", saved.blobs)
        self._kept, self._blobs_changed, self._made = len(saved.rows), False, {}

    def _insert(self, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` into ``table`` (its ``columns``, comma-separated)."""
        if self._sqlite:
            marks = ", ".join("?" * len(columns.split(",")))
            self._db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
            return
        # COPY: an INSERT of many rows costs psycopg more to parse than the server to run.
        with (
            self._db.cursor() as cursor,
            cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)

    def _kept_in(self, sha256: str) -> list[tuple[int, str, list[Blob]]]:
        """SQLite: the rows whose content may keep the blob of ``sha256`` (its position, its
        stream and the blobs it keeps), as ``contents`` finds them."""
        if not self._sqlite:
            return []
        key = _content_key(bytes.fromhex(sha256))
        return [
            (position, stream, _content(stream, content))
            for position, stream, content in self._query(_KEPT_IN_SQL, (key,))
            if content is not None
        ]

    def _blob(self, sha256: str) -> bytes | None:
        """The bytes of the blob of ``sha256``: one ``with_text`` made, in ``blobs``, or kept
        in a row's content (SQLite); ``None`` if deleted or nowhere."""
        if sha256 in self._made:
            return self._made[sha256]
        found = self._query("SELECT data FROM blobs WHERE sha256 = ?", (sha256,))
        if found:  # as the store reads it: a blob's row first
            return None if found[0][0] is None else bytes(found[0][0])
        digest = bytes.fromhex(sha256)
        for _, _, blobs in self._kept_in(sha256):
            for blob in blobs:
                if isinstance(blob, bytes) and _digest(blob) == digest:
                    return blob
        return None

    def text(self, value: Content) -> str:
        """The text of a content field: inline, or in the blob it names."""
        if isinstance(value, str):
            return value
        blob = self._blob(value["sha256"])
        assert blob is not None, f"blob {value['sha256']}: its content is gone"
        return blob[value.get("skip", 0) :].decode()

    def with_text(self, value: Content, text: str) -> Content:
        """``value`` holding ``text`` instead: inline, as it was, or a new blob with the old
        one's scope, as a new reference: written now to ``blobs``, or (SQLite, small enough)
        put by ``rewrite`` in the row of the first event naming it."""
        if isinstance(value, str):
            return text
        skip = value.get("skip", 0)
        old = self._blob(value["sha256"])
        assert old is not None, f"blob {value['sha256']}: its content is gone"
        blob = old[:skip] + text.encode()
        sha256 = hashlib.sha256(blob).hexdigest()
        if self._sqlite and len(blob) <= _INLINE_MAX:
            self._made[sha256] = blob
        else:
            self._blobs_changed = True
            with self._transaction() as execute:
                execute(
                    "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?) "
                    "ON CONFLICT (sha256) DO NOTHING",
                    (sha256, len(blob), blob),
                )
        return {**value, "sha256": sha256, "size": len(text.encode())}

    def delete_content(self, sha256: str) -> None:
        """Delete a blob's content and keep its key, as an erasure or an expiry does: its
        ``blobs`` row's data, or (SQLite) the blob in each row's content that keeps it, its
        sha-256 left in its place."""
        self._blobs_changed = True
        self._made.pop(sha256, None)
        digest = bytes.fromhex(sha256)
        with self._transaction() as execute:
            execute("UPDATE blobs SET data = NULL WHERE sha256 = ?", (sha256,))
            for position, stream, blobs in self._kept_in(sha256):
                left = [[digest] if _digest(blob) == digest else blob for blob in blobs]
                if left == blobs:
                    continue
                content = _pack_content(stream, left)
                execute("UPDATE appends SET content = ? WHERE position = ?", (content, position))
                ((before,),) = self._query(
                    "SELECT count(*) FROM appends WHERE position < ?", (position,)
                )
                self._kept = min(self._kept, int(before))  # restored from this row on

    def _key(self, stream: str) -> object:
        """What ``appends`` calls ``stream``: its id (PostgreSQL), or its key in ``names``
        (SQLite; ``None`` if it has none)."""
        if not self._sqlite:
            return stream
        found = self._query("SELECT key FROM names WHERE name = ?", (stream,))
        return int(found[0][0]) if found else None

    def _stream_rows(self, key: object) -> list[Row]:
        """The rows of stream ``key`` (``_key``), in seq order."""
        query = f"SELECT {self._columns} FROM appends WHERE stream = ? ORDER BY seq"
        return [] if key is None else self._query(query, (key,))

    def log(self, stream: str) -> list[Record]:
        """``stream``'s events, in seq order, as their entries decode."""
        return _log(stream, self._stream_rows(self._key(stream)))

    def rewrite(self, stream: str, records: list[Record], sign: Sign | None = None) -> None:
        """Make ``records`` the log of ``stream``, consistently: each gets its seq (dense from
        1), the stream's name and the hash of the one before it, then its entry and its hash;
        ``stream``'s events go in rows of as many as its old rows held, in turn, laid out where
        its old ones were (those past them right after its last), SQLite's positions then
        renumbered with no gap; the head row set to the last event. ``sign`` re-signs each
        ``HeadSigned`` over the event before it; without it, they are left as they were (no
        key). In SQLite, ``contents`` finds the content of each row written again where it is
        now."""
        prev, events = GENESIS, []
        for seq, record in enumerate(records, start=1):
            record = {**record, "stream": stream, "seq": seq, "prev_hash": prev}
            if sign is not None and record["body"]["type"] == "HeadSigned":
                record["body"] = {**record["body"], **sign(stream, seq - 1, prev)}
            entry = _entry(record)
            prev = _chained(stream, prev, entry)
            events.append((seq, record["body"]["type"], record["v"], entry, prev))
        old = self._rows()
        key, new = self._new_rows(stream, events)
        laid = self._lay_out(old, key, new)
        first = next(
            (i for i, (a, b) in enumerate(zip(old, laid, strict=False)) if a != b),
            min(len(old), len(laid)),
        )
        self._kept = min(self._kept, first)
        created = "SELECT min(t.position) FROM appends AS t WHERE t.stream = streams.stream"
        if self._sqlite:
            created = (
                "SELECT min(t.position) FROM appends AS t JOIN names AS n ON n.key = t.stream "
                "WHERE n.name = streams.stream"
            )
        end = self._end(laid[:first])
        with self._transaction() as execute:
            execute("DELETE FROM appends WHERE position > ?", (end,))
            self._insert("appends", self._columns, laid[first:])
            if self._sqlite:
                execute("DELETE FROM contents WHERE position > ?", (end,))
                names = dict(self._query("SELECT key, name FROM names"))
                self._insert("contents", "key, position", _contents(laid[first:], names))
            execute(
                "UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?",
                (len(events), prev, stream),
            )
            execute(f"UPDATE streams SET created = coalesce(({created}), created)", ())

    def _new_rows(self, stream: str, events: list[Event]) -> tuple[object, list[Row]]:
        """What ``appends`` calls ``stream`` (``_key``; SQLite gives it a key if it has none),
        and its rows of ``events`` (positions left 0): as many events in each as in its old
        rows, in turn (any more in one row after them); a row that is as it was keeps its
        bytes. In SQLite, each keeps the content of its old row (those of old rows left over
        go in the last), plus the blobs ``with_text`` made that its events first name."""
        key = self._key(stream)
        if key is None:
            with self._transaction() as execute:
                execute(_NAME_SQL, (stream,))
            key = self._key(stream)
        mine = self._stream_rows(key)
        rows: list[list[Any]] = []
        added: list[list[Blob]] = []
        prev, at = GENESIS, 0
        for size in [*(row[3] for row in mine), len(events)]:
            part = events[at : at + size]
            if not part:
                continue
            # SQLite's row keeps no prev_hash: it is the hash of the row before.
            kept = None if self._sqlite else prev
            row: list[Any] = [0, key, part[-1][0], len(part), kept, part[-1][4]]
            old = mine[len(rows)] if len(rows) < len(mine) else None
            if old is not None and list(old[1:6]) == row[1:]:  # its hash binds its entries
                row.append(old[6])
            else:
                row.append(_compressed(b"".join(entry for _, _, _, entry, _ in part)))
            if self._sqlite:
                row.append(None if old is None else old[7])
                named = [sha for sha in self._made if any(_named(sha, e[3]) for e in part)]
                added.append([self._made.pop(sha) for sha in named])
            rows.append(row)
            prev, at = part[-1][4], at + len(part)
        if self._sqlite and rows:  # a blob stays when its event goes, as a row of ``blobs`` does
            for old in mine[len(rows) :]:
                if old[7] is not None:
                    added[-1] = [*_content(stream, old[7]), *added[-1]]
            for row, blobs in zip(rows, added, strict=True):
                if blobs:
                    had = [] if row[7] is None else _content(stream, row[7])
                    row[7] = _pack_content(stream, [*had, *blobs])
        return key, [tuple(row) for row in rows]

    def _lay_out(self, old: list[Row], key: object, new: list[Row]) -> list[Row]:
        """The store's rows with stream ``key``'s replaced by ``new`` slot for slot (the rest
        right after its last slot, or at the end), then placed: SQLite's positions renumbered
        with no gap from the first row's; PostgreSQL's, not a count, stay (a new row takes
        its slot's; one past the last slot, the position after the row before's events)."""
        mine = [i for i, row in enumerate(old) if row[1] == key]
        last = mine[-1] if mine else len(old) - 1
        rows: list[Row] = []
        taken = iter(new)
        for i, row in enumerate(old):
            if row[1] != key:
                rows.append(row)
            elif (put := next(taken, None)) is not None:
                rows.append(put)
            if i == last:
                rows.extend(taken)
        if not old:
            rows.extend(taken)
        laid: list[Row] = []
        if self._sqlite:
            position = int(old[0][0]) if old else 1
            for row in rows:
                laid.append((position, *row[1:]))
                position += row[3]
            return laid
        slots = iter([row[0] for row in old if row[1] == key])
        end = self._end(old)
        for row in rows:
            if row[1] == key:
                position = next(slots, end + 1)
                row, end = (position, *row[1:]), position + row[3] - 1
            laid.append(row)
        return laid


def _contents(rows: list[Row], names: dict[int, str]) -> list[tuple[Any, ...]]:
    """SQLite's ``contents`` rows ``(key, position)`` of the blobs ``rows`` keep (a deleted
    one's too, as the store leaves it); ``names`` names their streams' keys."""
    found = {
        (_content_key(_digest(blob)), row[0])
        for row in rows
        if row[7] is not None
        for blob in _content(names[row[1]], row[7])
    }
    return sorted(found, key=lambda kept: (kept[1], kept[0]))


def head_message(stream: str, seq: int, head_hash: bytes, fingerprint: str) -> bytes:
    """What a signed head signs, as docs/event-log.md#signed-heads spells it."""
    return (
        b"plait-head-v1\0"
        + stream.encode()
        + b"\0"
        + seq.to_bytes(8, "big")
        + head_hash
        + fingerprint.encode()
    )


class AttackerKey:
    """An Ed25519 key of the insider's own (the session's key they do not have)."""

    def __init__(self, path: str | Path) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        self._key = key
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.fingerprint = hashlib.sha256(raw).hexdigest()
        """Its own fingerprint: sha-256 of its raw public key, hex."""

    def signer(self, claim: str | None = None) -> Sign:
        """Sign heads with this key, naming ``claim`` as the key's fingerprint (by default
        its own)."""
        fingerprint = claim or self.fingerprint

        def sign(stream: str, seq: int, head_hash: bytes) -> dict[str, Any]:
            message = head_message(stream, seq, head_hash, fingerprint)
            signature = self._key.sign(message)
            return {
                "seq": seq,
                "head_hash": head_hash,
                "fingerprint": fingerprint,
                "signature": signature,
            }

        return sign


def witness_lines(path: Path) -> list[dict[str, Any]]:
    """The witness file's lines, each a JSON object."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_witness_line(path: Path, line: dict[str, Any]) -> None:
    """Append ``line`` to the witness file, as anyone who may append to it can."""
    with path.open("a") as file:
        file.write(json.dumps(line) + "\n")
