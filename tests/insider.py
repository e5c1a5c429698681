"""What someone with write access to a store's database can do to a session's log.

This is the insider of docs/event-log.md#signed-heads, with nothing but what that page says of
the storage format: a stream's rows and its head row (``streams``: ``last_seq, last_hash``);
each event's ``prev_hash``, the hash of the event before it (32 zero bytes for seq 1); and what
docs/storage.md says of content kept apart, in ``blobs`` rows (``sha256, size, data``) that an
event names by the sha-256 of their bytes. It reads the rows with plain SQL (``sqlite3`` on the
file, ``psycopg`` on the schema), decodes them, changes what it likes, then writes the stream
back consistently: seqs dense, every hash recomputed, positions renumbered so none is missing
anywhere in the store (SQLite; in PostgreSQL, kept in order), the head row set. It imports
nothing of plait's: no plait API writes a forgery.

A SQLite store of layouts 1 to 3 keeps a row per event, ``position, stream, seq, type, v, data,
hash`` of ``events``, positions dense from 1 across the store, each event's ``data`` the
msgpack of its envelope: a map (encoding 1) or, as plait writes now, an array of its fields in
order with the stream, position and hash left empty (encoding 2); its ``hash`` the sha-256 of
those bytes (encoding 2: of the msgpack of its stream, then them).

A SQLite store of layout 4 (it has a ``groups`` table; docs/storage.md) keeps a row per
append instead: ``position, stream, seq, count, base, data, hash, content``, the row holding
positions and seqs from its own on, ``count`` of them, ``stream`` a key of ``names``, ``hash``
its last event's. Its ``data`` is the byte 1, then the raw deflate of its "raw" bytes, with as
preset dictionary ``src/plait/events/stores/dictionary-1.bin`` followed by the raw bytes of
the rows before it of its chain (at most two, the last 32 KiB; none for a row whose ``base``,
the seq its chain starts at, is NULL). The raw bytes, with lowercase hex digests and UUIDs
made binary (0xc1 escapes), are a 4-byte big-endian length, the msgpack of ``[type, v, tail,
length]`` per event, then the events' stored bytes end to end, each with its ``prev_hash``
emptied (``c4 00`` where ``c4 20`` and the hash were, ``tail`` bytes from their end; -1: kept
whole), to be put back from the hash of the event before (the row before's ``hash``, for a
row's first). Its ``content`` is the raw deflate (dictionary, then the stream's id) of the
msgpack array of the small blobs (4096 bytes at most) its append made, a deleted one as the
array of its sha-256; ``contents`` finds a row's blob by the first 4 bytes of its sha-256 (a
signed integer); bigger blobs are in ``blobs`` as before. The insider reads and writes those
rows the same way: a stream it rewrites is laid out in rows of as many events as its old
rows held (any more in one row after them), each keeping its old row's content; its rows
as they were up to the first it changed, each after it standing alone (base NULL). A blob it
makes small enough goes in the content of the first row whose events name it.

A PostgreSQL store (layout 5) keeps a row per append too, in ``appends`` (encoding 3,
docs/event-log.md#encoding-3): ``position, stream, seq, count, prev_hash, hash, data``, its
``seq`` its last event's, ``count`` how many it holds, ``position`` its first event's (its
transaction's id shifted left 20 bits; its events' are that plus their index), ``prev_hash``
the hash its first event follows, ``hash`` its last event's. Its ``data`` is one zstd frame
(level 3, its content size written, the dictionary ``src/plait/events/zstd-1.dict``, which
the frame names) of its events' entries end to end: an entry is the msgpack array ``[seq, at,
v, body, conversation_id, task_id]`` (plait writes the last two as nil when empty), and an
event's hash is the sha-256 of the msgpack of its stream, then the hash it follows, then its
entry. (A row an earlier layout's event was moved to, its ``prev_hash`` empty and its ``data``
that event's bytes, is not read: the stores forged here are written by this plait.) A stream
it rewrites is laid out in rows of as many events as its old rows held (any more in one row
after them), each at its old row's position (one past them right after the last's events); a
row that is as it was keeps its bytes. Blobs are all in ``blobs``.

What it cannot do is sign with the session's key. It can sign with a key of its own
(``AttackerKey``), over the bytes that page describes, and it can edit the witness file of
signed heads (``witness_lines``, ``append_witness_line``) by appending to it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import zlib
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
"""One event as its stored msgpack decodes: ``stream``, ``seq``, ``at``, ``v``, ``body`` (a
map whose ``type`` names it), ``prev_hash``, and ``conversation_id``/``task_id`` where set."""

Row = tuple[Any, ...]
"""A row of the table of events: ``(position, stream, seq, type, v, data, hash)`` of
``events``; ``(position, stream, seq, count, base, data, hash, content)`` of layout 4's
``groups``, its ``stream`` a key of ``names``; ``(position, stream, seq, count, prev_hash,
hash, data)`` of PostgreSQL's ``appends``."""

Event = tuple[int, str, int, bytes, bytes]
"""One event as a stream's log holds it: seq, type, v, its stored bytes (PostgreSQL's: its
entry), their hash."""

GENESIS = bytes(32)
"""``prev_hash`` of a stream's first event."""

Sign = Callable[[str, int, bytes], dict[str, Any]]
"""Given a stream, the seq of the head to sign and its hash: the ``HeadSigned`` fields
(``seq``, ``head_hash``, ``fingerprint``, ``signature``) to put in its place."""


Content = str | dict[str, Any]

_FIELDS = (
    "stream",
    "seq",
    "at",
    "v",
    "body",
    "prev_hash",
    "conversation_id",
    "task_id",
    "position",
    "hash",
)
"""An event's fields, in the order encoding 2 stores them."""


def _record(stream: str, data: bytes) -> Record:
    """An event's stored bytes, of either encoding, as a ``Record``."""
    raw = msgspec.msgpack.decode(data)
    if isinstance(raw, dict):
        return raw
    record = dict(zip(_FIELDS, raw, strict=True))
    del record["position"], record["hash"]
    return {**record, "stream": stream}


def _encoded(record: Record) -> tuple[bytes, bytes]:
    """A ``Record``'s bytes in encoding 2, and their hash."""
    stored = {**record, "stream": "", "position": 0, "hash": b""}
    data = msgspec.msgpack.encode([stored.get(name) for name in _FIELDS])
    return data, _hash(record["stream"], data)


def _hash(stream: str, data: bytes) -> bytes:
    """The hash of an event's stored bytes: encoding 2's (an array, 0x9_) binds its stream."""
    if data[:1] >= b"\x90":
        return hashlib.sha256(msgspec.msgpack.encode(stream) + data).digest()
    return hashlib.sha256(data).digest()


# --- layout 4: a row per append ----------------------------------------------------------------

_DICTIONARY = (
    Path(__file__).resolve().parents[1] / "src/plait/events/stores/dictionary-1.bin"
).read_bytes()
"""The preset dictionary of format 1 of a ``groups`` row's ``data`` (and of its content)."""

_FORMAT = b"\x01"
_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: a ``prev_hash``
_EMPTIED = b"\xc4\x00"  # and of none: the ``prev_hash`` as a row keeps it
_WINDOW = 32_768  # what deflate can refer back to
_CONTEXT_ROWS = 2  # rows before it in its chain a row is compressed after
_INLINE_MAX = 4096  # bytes at most of a blob kept in its append's row

# Hex digests and UUIDs as msgpack strings, kept as their bytes after an escape byte 0xc1
# (never a msgpack type; a 0xc1 of the bytes themselves is escaped too).
_TO_BINARY = re.compile(
    rb"\xd9\x40([0-9a-f]{64})|\xd9\x24([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-"
    rb"([0-9a-f]{12})|\xc1"
)
_FROM_BINARY = re.compile(rb"\xc1(?:\x00|\x01([\x00-\xff]{32})|\x02([\x00-\xff]{16}))")


def _binary(match: re.Match[bytes]) -> bytes:
    if match.group(1):
        return b"\xc1\x01" + bytes.fromhex(match.group(1).decode())
    if match.group(2):
        return b"\xc1\x02" + bytes.fromhex(b"".join(match.group(2, 3, 4, 5, 6)).decode())
    return b"\xc1\x00"


def _text(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return b"\xd9\x40" + match.group(1).hex().encode()
    if match.group(2) is not None:
        h = match.group(2).hex()
        return b"\xd9\x24" + f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode()
    return b"\xc1"


def _zdict(context: bytes) -> bytes:
    return (_DICTIONARY + context)[-_WINDOW:] if context else _DICTIONARY


def _unpack(data: bytes, context: bytes) -> tuple[list[list[Any]], bytes]:
    """A ``groups`` row's ``data``, compressed after ``context``, as its items ``[type, v,
    tail, cut]``, and its raw bytes (what a row after it in its chain is compressed after)."""
    assert data[:1] == _FORMAT, f"a row's data of format {data[:1].hex()}"
    inflate = zlib.decompressobj(-15, zdict=_zdict(context))
    raw = inflate.decompress(data[1:]) + inflate.flush()
    assert inflate.eof and not inflate.unused_data, "a row's data that does not inflate whole"
    packed = _FROM_BINARY.sub(_text, raw)
    size = int.from_bytes(packed[:4], "big")
    header = msgspec.msgpack.decode(packed[4 : 4 + size])
    items, at = [], 4 + size
    for type_name, v, tail, length in header:
        items.append([type_name, v, tail, packed[at : at + length]])
        at += length
    assert at == len(packed), "a row's events' lengths do not add up to its bytes"
    return items, raw


def _pack(items: list[list[Any]]) -> bytes:
    """The ``data`` of a ``groups`` row of ``items``, standing alone (its ``base`` NULL)."""
    header = msgspec.msgpack.encode([[t, v, tail, len(cut)] for t, v, tail, cut in items])
    packed = b"".join([len(header).to_bytes(4, "big"), header, *(cut for *_, cut in items)])
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=_DICTIONARY)
    return _FORMAT + deflate.compress(_TO_BINARY.sub(_binary, packed)) + deflate.flush()


def _stream_items(rows: list[Row]) -> list[list[list[Any]]]:
    """The items of each of a stream's ``groups`` rows (in seq order), each unpacked after
    the rows before it of its chain: those since the last row of ``base`` NULL whose ``base``
    is that row's seq (a row of another ``base`` stands alone)."""
    out: list[list[list[Any]]] = []
    context: list[bytes] = []
    chain: int | None = None
    for _, _, seq, _, base, data, *_ in rows:
        if base is None or base != chain:
            context, chain = [], seq if base is None else None
        items, raw = _unpack(data, b"".join(context))
        context = [*context, raw][-_CONTEXT_ROWS:]
        out.append(items)
    return out


def _whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes, from its item's ``cut`` bytes and ``tail``, after ``prev``."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return cut[: end - 2] + _CUT + prev + cut[end:]


def _item(type_name: str, v: int, data: bytes, prev: bytes) -> list[Any]:
    """The item of an event's stored bytes whose ``prev_hash`` is ``prev``: the last place
    they hold it (it follows the body) emptied."""
    at = data.rfind(_CUT + prev)
    if at < 0:
        return [type_name, v, -1, data]
    return [type_name, v, len(data) - at - 34, data[:at] + _EMPTIED + data[at + 34 :]]


def _events(stream: str, rows: list[Row]) -> list[Event]:
    """The events of ``stream``'s ``groups`` rows (in seq order), each with its bytes whole."""
    events: list[Event] = []
    prev = GENESIS
    for row, items in zip(rows, _stream_items(rows), strict=True):
        for i, (type_name, v, tail, cut) in enumerate(items):
            whole = _whole(cut, tail, prev)
            prev = _hash(stream, whole)
            events.append((row[2] + i, type_name, v, whole, prev))
        prev = row[6]  # what the next row's first event follows, as the row says
    return events


Blob = bytes | list[bytes]
"""A blob a row's ``content`` keeps: its bytes, or (deleted) ``[its sha-256]``."""


def _content(stream: str, content: bytes) -> list[Blob]:
    """The blobs a row of ``stream`` keeps in its ``content``."""
    inflate = zlib.decompressobj(-15, zdict=_DICTIONARY + stream.encode())
    blobs: list[Blob] = msgspec.msgpack.decode(inflate.decompress(content) + inflate.flush())
    return blobs


def _pack_content(stream: str, blobs: list[Blob]) -> bytes:
    """The ``content`` of a row of ``stream`` keeping ``blobs``."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=_DICTIONARY + stream.encode())
    return deflate.compress(msgspec.msgpack.encode(blobs)) + deflate.flush()


def _digest(blob: Blob) -> bytes:
    """The sha-256 of a blob a row keeps (a deleted one's, as it says)."""
    return blob[0] if isinstance(blob, list) else hashlib.sha256(blob).digest()


def _content_key(digest: bytes) -> int:
    """The key in ``contents`` of a blob of that sha-256: its first 4 bytes, signed."""
    return int.from_bytes(digest[:4], "big", signed=True)


# --- PostgreSQL's layout 5: a row per append, of encoding 3 -----------------------------------

_ZSTD_DICTIONARY = (
    Path(__file__).resolve().parents[1] / "src/plait/events/zstd-1.dict"
).read_bytes()
"""The dictionary an ``appends`` row's ``data`` is compressed with (the frame names it)."""

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


def _entries(data: bytes, count: int) -> list[bytes]:
    """The ``count`` entries an ``appends`` row's ``data`` holds."""
    assert data[:4] == _ZSTD_MAGIC, "a row of an earlier layout's event, moved whole: not read"
    plain = _zstd()[1].decompress(data)
    return [bytes(raw) for raw in _RAWS.decode(b"\xdd" + count.to_bytes(4, "big") + plain)]


def _pack_entries(entries: list[bytes]) -> bytes:
    """The ``data`` of an ``appends`` row of ``entries``."""
    compressed: bytes = _zstd()[0].compress(b"".join(entries))
    return compressed


def _entry(record: Record) -> bytes:
    """A ``Record``'s entry, its six fields all there, as plait writes them."""
    return msgspec.msgpack.encode([record.get(name) for name in _ENTRY])


def _chained(stream: str, prev: bytes, entry: bytes) -> bytes:
    """The hash of an entry of ``stream`` that follows the event of hash ``prev``."""
    return hashlib.sha256(msgspec.msgpack.encode(stream) + prev + entry).digest()


def _appends_log(stream: str, rows: list[Row]) -> list[Record]:
    """The events of ``stream``'s ``appends`` rows (in seq order) as ``Record``s."""
    records: list[Record] = []
    for _, _, _, count, prev, _, data in rows:
        for entry in _entries(data, count):  # each follows the one before, the first the row's
            fields = msgspec.msgpack.decode(entry)
            fields += [None] * (len(_ENTRY) - len(fields))
            records.append(
                {**dict(zip(_ENTRY, fields, strict=True)), "stream": stream, "prev_hash": prev}
            )
            prev = _chained(stream, prev, entry)
    return records


# --- the insider -------------------------------------------------------------------------------


class Saved(NamedTuple):
    """A store's rows of events (``events``, ``groups`` of layout 4 or ``appends``),
    ``streams``, ``blobs`` and (layout 4) ``contents``, as ``Insider.save`` read them."""

    rows: list[Row]
    heads: list[tuple[Any, ...]]
    blobs: list[tuple[Any, ...]]
    contents: list[tuple[Any, ...]]


_COLUMNS = "position, stream, seq, type, v, data, hash"
_GROUP_COLUMNS = "position, stream, seq, count, base, data, hash, content"
_APPEND_COLUMNS = "position, stream, seq, count, prev_hash, hash, data"

_KEPT_IN_SQL = (
    "SELECT g.position, n.name, g.content FROM contents AS c "
    "JOIN groups AS g ON g.position = c.position JOIN names AS n ON n.key = g.stream "
    "WHERE c.key = ? ORDER BY g.position"
)
"""The rows of layout 4 whose content may keep a blob (by its key in ``contents``)."""


class Insider:
    """Raw SQL on one store's tables: read a stream's log, write it back re-chained."""

    def __init__(self, connection: Any, param: str) -> None:
        self._db = connection
        self._p = param
        self._groups = param == "?" and bool(
            self._query("SELECT 1 FROM sqlite_master WHERE name = 'groups'")
        )
        """Whether the store is a SQLite store of layout 4, a row per append."""
        self._appends = param == "%s"
        """Whether the store is a PostgreSQL store of layout 5, a row per append."""
        self._table, self._columns = (
            ("groups", _GROUP_COLUMNS)
            if self._groups
            else ("appends", _APPEND_COLUMNS)
            if self._appends
            else ("events", _COLUMNS)
        )
        self._kept = 0
        """The first rows, as many, are as ``save`` read them (``rewrite`` and
        ``delete_content`` lower it)."""
        self._blobs_changed = False
        self._made: dict[str, bytes] = {}
        """Layout 4: the blobs ``with_text`` made small enough to be kept in a row's content,
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

        if self._p == "?":
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
        """Every row of the table of events, in position order."""
        return self._query(f"SELECT {self._columns} FROM {self._table} ORDER BY position")

    def _end(self, rows: list[Row]) -> int:
        """The last position ``rows`` hold (0: none)."""
        if not rows:
            return 0
        return int(rows[-1][0]) + (int(rows[-1][3]) - 1 if self._groups or self._appends else 0)

    def save(self) -> Saved:
        """Every row of the table of events, ``streams``, ``blobs`` and ``contents``, to
        ``restore`` later."""
        rows = self._rows()
        heads = self._query(
            "SELECT stream, last_seq, last_hash, created FROM streams ORDER BY stream"
        )
        blobs = self._query("SELECT sha256, size, data FROM blobs ORDER BY sha256")
        contents: list[tuple[Any, ...]] = []
        if self._groups:
            contents = self._query("SELECT key, position FROM contents ORDER BY position, key")
        self._kept, self._blobs_changed, self._made = len(rows), False, {}
        return Saved(rows, heads, blobs, contents)

    def restore(self, saved: Saved) -> None:
        """Put back the rows ``save`` read, as they were (those changed since: by ``rewrite``,
        or a row's content by ``delete_content``)."""
        kept = min(self._kept, len(saved.rows))
        end = self._end(saved.rows[:kept])
        with self._transaction() as execute:
            execute(f"DELETE FROM {self._table} WHERE position > ?", (end,))
            execute("DELETE FROM streams", ())
            self._insert(self._table, self._columns, saved.rows[kept:])
            self._insert("streams", "stream, last_seq, last_hash, created", saved.heads)
            if self._groups:
                execute("DELETE FROM contents WHERE position > ?", (end,))
                contents = [kept for kept in saved.contents if kept[1] > end]
                self._insert("contents", "key, position", contents)
            if self._blobs_changed:
                execute("DELETE FROM blobs", ())
                self._insert("blobs", "sha256, size, data", saved.blobs)
        self._kept, self._blobs_changed, self._made = len(saved.rows), False, {}

    def _insert(self, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` into ``table`` (its ``columns``, comma-separated)."""
        if self._p == "?":
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
        """Layout 4: the rows whose content may keep the blob of ``sha256`` (its position,
        its stream and the blobs it keeps), as ``contents`` finds them."""
        if not self._groups:
            return []
        key = _content_key(bytes.fromhex(sha256))
        return [
            (position, stream, _content(stream, content))
            for position, stream, content in self._query(_KEPT_IN_SQL, (key,))
            if content is not None
        ]

    def _blob(self, sha256: str) -> bytes | None:
        """The bytes of the blob of ``sha256``: one ``with_text`` made, in ``blobs``, or kept
        in a row's content (layout 4); ``None`` if deleted or nowhere."""
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
        one's scope, as a new reference: written now to ``blobs``, or (layout 4, small
        enough) put by ``rewrite`` in the row of the first event naming it."""
        if isinstance(value, str):
            return text
        skip = value.get("skip", 0)
        old = self._blob(value["sha256"])
        assert old is not None, f"blob {value['sha256']}: its content is gone"
        blob = old[:skip] + text.encode()
        sha256 = hashlib.sha256(blob).hexdigest()
        if self._groups and len(blob) <= _INLINE_MAX:
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
        ``blobs`` row's data, or (layout 4) the blob in each row's content that keeps it,
        its sha-256 left in its place."""
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
                execute("UPDATE groups SET content = ? WHERE position = ?", (content, position))
                ((before,),) = self._query(
                    "SELECT count(*) FROM groups WHERE position < ?", (position,)
                )
                self._kept = min(self._kept, int(before))  # restored from this row on

    def _key(self, stream: str) -> int | None:
        """``stream``'s key in ``names`` (layout 4), if it has one."""
        found = self._query("SELECT key FROM names WHERE name = ?", (stream,))
        return int(found[0][0]) if found else None

    def _stream_rows(self, key: object) -> list[Row]:
        """The rows of stream ``key`` (of layout 4's ``groups``: its key in ``names``), in
        seq order."""
        query = f"SELECT {self._columns} FROM {self._table} WHERE stream = ? ORDER BY seq"
        return [] if key is None else self._query(query, (key,))

    def log(self, stream: str) -> list[Record]:
        """``stream``'s events, in seq order, as their stored msgpack decodes."""
        if self._groups:
            events = _events(stream, self._stream_rows(self._key(stream)))
            return [_record(stream, data) for _, _, _, data, _ in events]
        if self._appends:
            return _appends_log(stream, self._stream_rows(stream))
        query = "SELECT data FROM events WHERE stream = ? ORDER BY seq"
        return [_record(stream, data) for (data,) in self._query(query, (stream,))]

    def rewrite(self, stream: str, records: list[Record], sign: Sign | None = None) -> None:
        """Make ``records`` the log of ``stream``, consistently: each gets its seq (dense from
        1), the stream's name and the hash of the one before it, then its bytes and their
        sha-256; the store's rows are laid out again with ``stream``'s new rows where its old
        ones were (those past them right after its last), positions renumbered from 1 with
        no gap (PostgreSQL's kept in order); the head row set to the last event. ``sign``
        re-signs each ``HeadSigned`` over the event before it; without it, they are left as
        they were (no key). In layout 4 and PostgreSQL's, ``stream``'s events go in rows of as
        many as its old rows held, in turn; in layout 4, ``contents`` finds the content of
        each row written again where it is now."""
        prev, events = GENESIS, []
        for seq, record in enumerate(records, start=1):
            record = {**record, "stream": stream, "seq": seq, "prev_hash": prev}
            if sign is not None and record["body"]["type"] == "HeadSigned":
                record["body"] = {**record["body"], **sign(stream, seq - 1, prev)}
            if self._appends:
                data = _entry(record)
                prev = _chained(stream, prev, data)
            else:
                data, prev = _encoded(record)
            events.append((seq, record["body"]["type"], record["v"], data, prev))
        old = self._rows()
        key, new = self._new_rows(stream, events)
        laid = self._lay_out(old, key, new)
        first = next(
            (i for i, (a, b) in enumerate(zip(old, laid, strict=False)) if a != b),
            min(len(old), len(laid)),
        )
        self._kept = min(self._kept, first)
        created = f"SELECT min(position) FROM {self._table} AS t WHERE t.stream = streams.stream"
        if self._groups:
            created = (
                "SELECT min(g.position) FROM groups AS g JOIN names AS n ON n.key = g.stream "
                "WHERE n.name = streams.stream"
            )
        end = self._end(laid[:first])
        with self._transaction() as execute:
            execute(f"DELETE FROM {self._table} WHERE position > ?", (end,))
            self._insert(self._table, self._columns, laid[first:])
            if self._groups:
                execute("DELETE FROM contents WHERE position > ?", (end,))
                self._insert("contents", "key, position", self._contents(laid[first:]))
            execute(
                "UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?",
                (len(events), prev, stream),
            )
            execute(f"UPDATE streams SET created = ({created})", ())

    def _contents(self, rows: list[Row]) -> list[tuple[Any, ...]]:
        """The ``contents`` rows ``(key, position)`` of the blobs ``groups`` ``rows`` keep
        (a deleted one's too, as the store leaves it)."""
        names = dict(self._query("SELECT key, name FROM names"))
        found = {
            (_content_key(_digest(blob)), row[0])
            for row in rows
            if row[7] is not None
            for blob in _content(names[row[1]], row[7])
        }
        return sorted(found, key=lambda kept: (kept[1], kept[0]))

    def _new_rows(self, stream: str, events: list[Event]) -> tuple[object, list[Row]]:
        """What the table's rows call ``stream``, and its rows of ``events`` (positions left
        0). In layout 4, as many events go in each row as in its old rows, in turn; the rows
        whose events are as they were, and all before them, keep their bytes (and ``base``),
        the rest stand alone; each keeps the content of its old row (those of old rows left
        over go in the last), plus the blobs ``with_text`` made that its events first name."""
        if self._appends:
            return stream, self._append_rows(stream, events)
        if not self._groups:
            return stream, [(0, stream, *event) for event in events]
        if (key := self._key(stream)) is None:
            with self._transaction() as execute:
                execute(
                    "INSERT OR IGNORE INTO names (name, key) "
                    "SELECT ?, coalesce(max(key), 0) + 1 FROM names",
                    (stream,),
                )
            key = self._key(stream)
        assert key is not None
        mine = self._stream_rows(key)
        was = _stream_items(mine)
        rows: list[list[Any]] = []
        added: list[list[Blob]] = []
        prev, at, same = GENESIS, 0, True
        for size in [*(row[3] for row in mine), len(events)]:
            part = events[at : at + size]
            if not part:
                continue
            items = []
            for _, type_name, v, data, digest in part:
                items.append(_item(type_name, v, data, prev))
                prev = digest
            i = len(rows)
            old = mine[i] if i < len(mine) else None
            # A row's bytes are compressed after those of the rows before it in its chain:
            # kept only while every row before it is.
            same = same and old is not None and old[2:4] == (part[0][0], len(part))
            same = same and was[i] == items
            base, data = (old[4], old[5]) if same and old is not None else (None, _pack(items))
            rows.append([0, key, part[0][0], len(part), base, data, prev, old and old[7]])
            named = [sha for sha in self._made if any(_named(sha, e[3]) for e in part)]
            added.append([self._made.pop(sha) for sha in named])
            at += len(part)
        if rows:  # a blob stays when its event goes, as a row of ``blobs`` does
            for old in mine[len(rows) :]:
                if old[7] is not None:
                    added[-1] = [*_content(stream, old[7]), *added[-1]]
        for row, blobs in zip(rows, added, strict=True):
            if blobs:
                had = [] if row[7] is None else _content(stream, row[7])
                row[7] = _pack_content(stream, [*had, *blobs])
        return key, [tuple(row) for row in rows]

    def _append_rows(self, stream: str, events: list[Event]) -> list[Row]:
        """``stream``'s ``appends`` rows of ``events`` (positions left 0): as many events in
        each as in its old rows, in turn (any more in one row after them); a row that is as
        it was keeps its bytes."""
        mine = self._stream_rows(stream)
        rows: list[Row] = []
        prev, at = GENESIS, 0
        for size in [*(row[3] for row in mine), len(events)]:
            part = events[at : at + size]
            if not part:
                continue
            row = (0, stream, part[-1][0], len(part), prev, part[-1][4])
            old = mine[len(rows)] if len(rows) < len(mine) else None
            if old is not None and old[1:6] == row[1:]:  # its hash binds its entries
                rows.append((*row, old[6]))
            else:
                rows.append((*row, _pack_entries([entry for _, _, _, entry, _ in part])))
            prev, at = part[-1][4], at + len(part)
        return rows

    def _lay_out(self, old: list[Row], key: object, new: list[Row]) -> list[Row]:
        """The store's rows with stream ``key``'s replaced by ``new`` slot for slot (the rest
        right after its last slot, or at the end), positions renumbered from 1 with no gap
        (PostgreSQL's, not a count, stay: a new row takes its slot's, one past the last slot
        the position after the last slot's events)."""
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
        if self._appends:
            # PostgreSQL: positions are not a count, so each slot keeps its own, and a row
            # past the last takes the next after the row before it.
            slots = iter([row[0] for row in old if row[1] == key])
            end, laid = self._end(old), []
            for row in rows:
                if row[1] == key:
                    position = next(slots, end + 1)
                    row, end = (position, *row[1:]), position + row[3] - 1
                laid.append(row)
            return laid
        position, laid = 1, []
        for row in rows:
            laid.append((position, *row[1:]))
            position += row[3] if self._groups else 1
        return laid


def _named(sha256: str, data: bytes) -> bool:
    """Whether an event's stored bytes name the blob of ``sha256`` (as a msgpack string)."""
    return b"\xd9\x40" + sha256.encode() in data


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
