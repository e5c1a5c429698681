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

Row = tuple[int, str, int, str, int, bytes, bytes]
"""An ``events`` row: position, stream, seq, type, v, data, hash."""

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
    return data, hashlib.sha256(msgspec.msgpack.encode(record["stream"]) + data).digest()


class Saved(NamedTuple):
    """A store's ``events``, ``streams`` and ``blobs`` rows, as ``Insider.save`` read them."""

    events: list[tuple[Any, ...]]
    heads: list[tuple[Any, ...]]
    blobs: list[tuple[Any, ...]]


_COLUMNS = "position, stream, seq, type, v, data, hash"


class Insider:
    """Raw SQL on one store's tables: read a stream's log, write it back re-chained."""

    def __init__(self, connection: Any, param: str) -> None:
        self._db = connection
        self._p = param
        self._kept = 0
        """Positions up to this one are as ``save`` read them (``rewrite`` lowers it)."""
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

    def save(self) -> Saved:
        """Every row of the ``events`` and ``streams`` tables, to ``restore`` later."""
        events = self._query(f"SELECT {_COLUMNS} FROM events ORDER BY position")
        heads = self._query(
            "SELECT stream, last_seq, last_hash, created FROM streams ORDER BY stream"
        )
        blobs = self._query("SELECT sha256, size, data FROM blobs ORDER BY sha256")
        self._kept, self._blobs_changed = len(events), False
        return Saved(events, heads, blobs)

    def restore(self, saved: Saved) -> None:
        """Put back the rows ``save`` read, as they were (those ``rewrite`` changed since)."""
        kept = min(self._kept, len(saved.events))
        with self._transaction() as execute:
            execute("DELETE FROM events WHERE position > ?", (kept,))
            execute("DELETE FROM streams")
            self._insert("events", _COLUMNS, saved.events[kept:])
            self._insert("streams", "stream, last_seq, last_hash, created", saved.heads)
            if self._blobs_changed:
                execute("DELETE FROM blobs")
                self._insert("blobs", "sha256, size, data", saved.blobs)
        self._kept, self._blobs_changed = len(saved.events), False

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

    def log(self, stream: str) -> list[Record]:
        """``stream``'s events, in seq order, as their stored msgpack decodes."""
        query = "SELECT data FROM events WHERE stream = ? ORDER BY seq"
        return [_record(stream, data) for (data,) in self._query(query, (stream,))]

    def rewrite(self, stream: str, records: list[Record], sign: Sign | None = None) -> None:
        """Make ``records`` the log of ``stream``, consistently: each gets its seq (dense from
        1), the stream's name and the hash of the one before it, then its bytes and their
        sha-256; the store's rows are laid out again with ``stream``'s new rows where its old
        ones were (those past them right after its last), positions renumbered from 1 with
        no gap; the head row set to the last event. ``sign`` re-signs each ``HeadSigned``
        over the event before it; without it, they are left as they were (no key)."""
        prev, new = GENESIS, []
        for seq, record in enumerate(records, start=1):
            record = {**record, "stream": stream, "seq": seq, "prev_hash": prev}
            if sign is not None and record["body"]["type"] == "HeadSigned":
                record["body"] = {**record["body"], **sign(stream, seq - 1, prev)}
            data, prev = _encoded(record)
            new.append((0, stream, seq, record["body"]["type"], record["v"], data, prev))
        old = self._query(f"SELECT {_COLUMNS} FROM events ORDER BY position")
        laid = _lay_out(old, stream, new)
        first = next(
            (i for i, (a, b) in enumerate(zip(old, laid, strict=False)) if a != b),
            min(len(old), len(laid)),
        )
        self._kept = min(self._kept, first)
        with self._transaction() as execute:
            execute("DELETE FROM events WHERE position > ?", (first,))
            self._insert("events", _COLUMNS, laid[first:])
            execute(
                "UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?",
                (len(new), prev, stream),
            )
            execute(
                "UPDATE streams SET created = (SELECT min(position) FROM events "
                "WHERE events.stream = streams.stream)"
            )


def _lay_out(old: list[Row], stream: str, new: list[Row]) -> list[Row]:
    """The store's rows with ``stream``'s replaced by ``new`` slot for slot (the rest right
    after its last slot, or at the end), positions renumbered from 1."""
    mine = [i for i, row in enumerate(old) if row[1] == stream]
    last = mine[-1] if mine else len(old) - 1
    rows: list[Row] = []
    taken = iter(new)
    for i, row in enumerate(old):
        if row[1] != stream:
            rows.append(row)
        elif (put := next(taken, None)) is not None:
            rows.append(put)
        if i == last:
            rows.extend(taken)
    if not old:
        rows.extend(taken)
    return [(position, *row[1:]) for position, row in enumerate(rows, start=1)]


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
