"""What someone with write access to a store's database can do to a session's log.

This is the insider of docs/event-log.md#signed-heads, with nothing but what that page says of
the storage format: a stream's rows (``position, stream, seq, type, v, data, hash``) and its
head row (``streams``: ``last_seq, last_hash``), each event's ``data`` the msgpack of its
envelope: a map (encoding 1) or, as plait writes now, an array of its fields in order with
the stream, position and hash left empty (encoding 2); its ``hash`` the sha-256 of those
bytes (encoding 2: of the msgpack of its stream, then them), its
``prev_hash`` the hash of the event before it (32 zero bytes for seq 1), positions dense from
1 across the store; and what
docs/storage.md says of content kept apart, in ``blobs`` rows (``sha256, size, data``) that an
event names by the sha-256 of their bytes. It reads the rows with plain SQL (``sqlite3`` on the
file, ``psycopg`` on the schema), decodes the msgpack, changes what it likes, then writes the
stream back consistently: seqs dense, every ``prev_hash`` and ``hash`` recomputed, positions
renumbered so none is missing anywhere in the store, the head row set. It imports nothing of
plait's: no plait API writes a forgery.

A SQLite store of layout 4 (it has a ``groups`` table; docs/storage.md#one-row-per-append)
keeps a row per append instead: ``position, stream, seq, count, data, hash``, the row holding
positions and seqs from its own on, ``count`` of them, ``stream`` a key of ``names``, ``hash``
its last event's. Its ``data`` is the byte 1, then the raw deflate, with the preset
dictionary ``src/plait/events/stores/dictionary-1.bin``, of the msgpack array of
``[type, v, tail, cut]`` per event: its stored bytes with the 34 of ``prev_hash`` (``c4 20``
and the hash) cut out, ``tail`` bytes from their end (-1: none cut), to be put back from the
hash of the event before (the row before's ``hash``, for a row's first). The insider reads
and writes those rows the same way: a stream it rewrites is laid out in rows of as many events
as its old rows held (any more in one row after them), a row whose events it did not change
kept as it was.

What it cannot do is sign with the session's key. It can sign with a key of its own
(``AttackerKey``), over the bytes that page describes, and it can edit the witness file of
signed heads (``witness_lines``, ``append_witness_line``) by appending to it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
``events``; ``(position, stream, seq, count, data, hash)`` of layout 4's ``groups``, its
``stream`` a key of ``names``."""

Event = tuple[int, str, int, bytes, bytes]
"""One event as a stream's log holds it: seq, type, v, its stored bytes, their hash."""

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
"""The preset dictionary of format 1 of a ``groups`` row's ``data``."""

_FORMAT = b"\x01"
_CUT = b"\xc4\x20"  # msgpack's header of 32 bytes of binary: the ``prev_hash`` cut out


def _unpack(data: bytes) -> list[list[Any]]:
    """A ``groups`` row's ``data`` as its items, ``[type, v, tail, cut]`` each."""
    assert data[:1] == _FORMAT, f"a row's data of format {data[:1].hex()}"
    inflate = zlib.decompressobj(-15, zdict=_DICTIONARY)
    items: list[list[Any]] = msgspec.msgpack.decode(inflate.decompress(data[1:]) + inflate.flush())
    return items


def _pack(items: list[list[Any]]) -> bytes:
    """The ``data`` of a ``groups`` row of ``items``."""
    deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15, zdict=_DICTIONARY)
    return _FORMAT + deflate.compress(msgspec.msgpack.encode(items)) + deflate.flush()


def _whole(cut: bytes, tail: int, prev: bytes) -> bytes:
    """An event's stored bytes, from its item's ``cut`` bytes and ``tail``, after ``prev``."""
    if tail < 0:
        return cut
    end = len(cut) - tail
    return cut[:end] + _CUT + prev + cut[end:]


def _item(type_name: str, v: int, data: bytes, prev: bytes) -> list[Any]:
    """The item of an event's stored bytes whose ``prev_hash`` is ``prev``: the last place
    they hold it (it follows the body) cut out."""
    at = data.rfind(_CUT + prev)
    if at < 0:
        return [type_name, v, -1, data]
    return [type_name, v, len(data) - at - 34, data[:at] + data[at + 34 :]]


def _events(stream: str, rows: list[Row]) -> list[Event]:
    """The events of ``stream``'s ``groups`` rows (in seq order), each with its bytes whole."""
    events: list[Event] = []
    prev = GENESIS
    for _, _, seq, _, data, digest in rows:
        for i, (type_name, v, tail, cut) in enumerate(_unpack(data)):
            whole = _whole(cut, tail, prev)
            prev = _hash(stream, whole)
            events.append((seq + i, type_name, v, whole, prev))
        prev = digest  # what the next row's first event follows, as the row says
    return events


def _grouped(key: int, events: list[Event], sizes: list[int]) -> list[Row]:
    """``groups`` rows of stream ``key``'s ``events`` (positions left 0): as many in each as
    ``sizes`` says, in turn, and any left after them in one more row."""
    rows: list[Row] = []
    prev, at = GENESIS, 0
    for size in [*sizes, len(events)]:
        part = events[at : at + size]
        if not part:
            continue
        items = []
        for _, type_name, v, data, digest in part:
            items.append(_item(type_name, v, data, prev))
            prev = digest
        rows.append((0, key, part[0][0], len(part), items, prev))
        at += len(part)
    return rows


# --- the insider -------------------------------------------------------------------------------


class Saved(NamedTuple):
    """A store's rows of events (``events``, or ``groups`` of layout 4), ``streams`` and
    ``blobs``, as ``Insider.save`` read them."""

    rows: list[Row]
    heads: list[tuple[Any, ...]]
    blobs: list[tuple[Any, ...]]


_COLUMNS = "position, stream, seq, type, v, data, hash"
_GROUP_COLUMNS = "position, stream, seq, count, data, hash"


class Insider:
    """Raw SQL on one store's tables: read a stream's log, write it back re-chained."""

    def __init__(self, connection: Any, param: str) -> None:
        self._db = connection
        self._p = param
        self._groups = param == "?" and bool(
            self._query("SELECT 1 FROM sqlite_master WHERE name = 'groups'")
        )
        """Whether the store is a SQLite store of layout 4, a row per append."""
        self._table, self._columns = (
            ("groups", _GROUP_COLUMNS) if self._groups else ("events", _COLUMNS)
        )
        self._kept = 0
        """The first rows, as many, are as ``save`` read them (``rewrite`` lowers it)."""
        self._blobs_changed = False

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
        return int(rows[-1][0]) + (int(rows[-1][3]) - 1 if self._groups else 0)

    def save(self) -> Saved:
        """Every row of the table of events, ``streams`` and ``blobs``, to ``restore`` later."""
        rows = self._rows()
        heads = self._query(
            "SELECT stream, last_seq, last_hash, created FROM streams ORDER BY stream"
        )
        blobs = self._query("SELECT sha256, size, data FROM blobs ORDER BY sha256")
        self._kept, self._blobs_changed = len(rows), False
        return Saved(rows, heads, blobs)

    def restore(self, saved: Saved) -> None:
        """Put back the rows ``save`` read, as they were (those ``rewrite`` changed since)."""
        kept = min(self._kept, len(saved.rows))
        with self._transaction() as execute:
            execute(
                f"DELETE FROM {self._table} WHERE position > ?", (self._end(saved.rows[:kept]),)
            )
            execute("DELETE FROM streams", ())
            self._insert(self._table, self._columns, saved.rows[kept:])
            self._insert("streams", "stream, last_seq, last_hash, created", saved.heads)
            if self._blobs_changed:
                execute("DELETE FROM blobs", ())
                self._insert("blobs", "sha256, size, data", saved.blobs)
        self._kept, self._blobs_changed = len(saved.rows), False

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

    def text(self, value: Content) -> str:
        """The text of a content field: inline, or in the blob it names."""
        if isinstance(value, str):
            return value
        ((data,),) = self._query("SELECT data FROM blobs WHERE sha256 = ?", (value["sha256"],))
        return bytes(data[value.get("skip", 0) :]).decode()

    def with_text(self, value: Content, text: str) -> Content:
        """``value`` holding ``text`` instead: inline, as it was, or a new blob with the old
        one's scope (written now), as a new reference."""
        if isinstance(value, str):
            return text
        skip = value.get("skip", 0)
        ((old,),) = self._query("SELECT data FROM blobs WHERE sha256 = ?", (value["sha256"],))
        blob = bytes(old[:skip]) + text.encode()
        sha256 = hashlib.sha256(blob).hexdigest()
        self._blobs_changed = True
        with self._transaction() as execute:
            execute(
                "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?) "
                "ON CONFLICT (sha256) DO NOTHING",
                (sha256, len(blob), blob),
            )
        return {**value, "sha256": sha256, "size": len(text.encode())}

    def delete_content(self, sha256: str) -> None:
        """Delete a blob's content and keep its row, as an erasure or an expiry does."""
        self._blobs_changed = True
        with self._transaction() as execute:
            execute("UPDATE blobs SET data = NULL WHERE sha256 = ?", (sha256,))

    def _key(self, stream: str) -> int | None:
        """``stream``'s key in ``names`` (layout 4), if it has one."""
        found = self._query("SELECT key FROM names WHERE name = ?", (stream,))
        return int(found[0][0]) if found else None

    def _stream_rows(self, key: int | None) -> list[Row]:
        """The ``groups`` rows of stream ``key``, in seq order."""
        query = f"SELECT {_GROUP_COLUMNS} FROM groups WHERE stream = ? ORDER BY seq"
        return [] if key is None else self._query(query, (key,))

    def log(self, stream: str) -> list[Record]:
        """``stream``'s events, in seq order, as their stored msgpack decodes."""
        if self._groups:
            events = _events(stream, self._stream_rows(self._key(stream)))
            return [_record(stream, data) for _, _, _, data, _ in events]
        query = "SELECT data FROM events WHERE stream = ? ORDER BY seq"
        return [_record(stream, data) for (data,) in self._query(query, (stream,))]

    def rewrite(self, stream: str, records: list[Record], sign: Sign | None = None) -> None:
        """Make ``records`` the log of ``stream``, consistently: each gets its seq (dense from
        1), the stream's name and the hash of the one before it, then its bytes and their
        sha-256; the store's rows are laid out again with ``stream``'s new rows where its old
        ones were (those past them right after its last), positions renumbered from 1 with
        no gap; the head row set to the last event. ``sign`` re-signs each ``HeadSigned``
        over the event before it; without it, they are left as they were (no key). In
        layout 4, ``stream``'s events go in rows of as many as its old rows held, in turn."""
        prev, events = GENESIS, []
        for seq, record in enumerate(records, start=1):
            record = {**record, "stream": stream, "seq": seq, "prev_hash": prev}
            if sign is not None and record["body"]["type"] == "HeadSigned":
                record["body"] = {**record["body"], **sign(stream, seq - 1, prev)}
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
        created = "SELECT min(position) FROM events WHERE events.stream = streams.stream"
        if self._groups:
            created = (
                "SELECT min(g.position) FROM groups AS g JOIN names AS n ON n.key = g.stream "
                "WHERE n.name = streams.stream"
            )
        with self._transaction() as execute:
            execute(f"DELETE FROM {self._table} WHERE position > ?", (self._end(laid[:first]),))
            self._insert(self._table, self._columns, laid[first:])
            execute(
                "UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?",
                (len(events), prev, stream),
            )
            execute(f"UPDATE streams SET created = ({created})", ())

    def _new_rows(self, stream: str, events: list[Event]) -> tuple[object, list[Row]]:
        """What the table's rows call ``stream``, and its rows of ``events`` (positions left
        0). In layout 4, as many events go in each row as in its old rows, in turn, and a row
        whose events are as they were keeps its bytes."""
        if not self._groups:
            return stream, [(0, stream, *event) for event in events]
        if (key := self._key(stream)) is None:
            with self._transaction() as execute:
                execute("INSERT INTO names (name) VALUES (?)", (stream,))
            key = self._key(stream)
        assert key is not None
        mine = self._stream_rows(key)
        was = {row[2]: (row[3], _unpack(row[4]), row[4]) for row in mine}
        rows: list[Row] = []
        for _, _, seq, count, items, digest in _grouped(key, events, [row[3] for row in mine]):
            same = was.get(seq, (0, [], b""))
            data = same[2] if same[:2] == (count, items) else _pack(items)
            rows.append((0, key, seq, count, data, digest))
        return key, rows

    def _lay_out(self, old: list[Row], key: object, new: list[Row]) -> list[Row]:
        """The store's rows with stream ``key``'s replaced by ``new`` slot for slot (the rest
        right after its last slot, or at the end), positions renumbered from 1 with no gap."""
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
        position, laid = 1, []
        for row in rows:
            laid.append((position, *row[1:]))
            position += row[3] if self._groups else 1
        return laid


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
