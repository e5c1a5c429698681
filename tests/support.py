"""Test support: stores of every backend, a deterministic clock, a way to tamper with a store."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from plait.actors import ModelSettings
from plait.events import GENESIS_HASH, Event, EventStore, ToolCallCompleted
from plait.events import _packing as packing
from plait.events._stored import Packed
from plait.events.stores import MemoryStore, SqliteStore
from plait.events.stores import _sqlite_content as sqlite_content
from plait.events.stores._sqlite_schema import NAME_SQL, SCHEMA
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer

POSTGRES_URL = os.environ.get("PLAIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


class TickClock:
    """A deterministic clock: each call is one millisecond after the last."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


class Tamper:
    """Edits a store's rows behind its back, as a disk fault or an attacker would: the head
    rows and the blobs here, the rows of events by a layout's own (``AppendsTamper``,
    ``MemoryTamper``).

    An event's bytes are what its layout stores of it: ``encode`` makes them, ``hash`` their
    hash (docs/event-log.md#encoding-3)."""

    def __init__(self, execute: Callable[[str, tuple[Any, ...]], None], param: str) -> None:
        self._execute = execute
        self._p = param

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._p)

    def encode(self, event: Event) -> bytes:
        """The bytes this layout stores of ``event``."""
        raise NotImplementedError

    def hash(self, stream: str, prev: bytes, data: bytes) -> bytes:
        """The hash of an event of ``stream`` stored as ``data``, after the event of hash
        ``prev``."""
        raise NotImplementedError

    def rechain(self, stream: str, events: Iterable[Event], prev: bytes) -> bytes:
        """Write ``events`` to ``stream`` at their seqs as an insider who re-hashes the chain
        does: each as this layout stores it, following the one before (the first ``prev``),
        with its hash; return the last one's hash, for the stream's head."""
        for event in events:
            placed = msgspec.structs.replace(
                event, stream=stream, prev_hash=prev, position=0, hash=b""
            )
            data = self.encode(placed)
            digest = self.hash(stream, prev, data)
            self.set_data(stream, event.seq, data, digest, prev=prev)
            prev = digest
        return prev

    def set_data(
        self,
        stream: str,
        seq: int,
        data: bytes,
        digest: bytes | None = None,
        *,
        prev: bytes | None = None,
    ) -> None:
        """Change an event's bytes, and its hash to ``digest`` (if given) where the rows keep
        it; ``prev``, the hash it follows, where the rows keep that apart from the bytes."""
        raise NotImplementedError

    def set_column(self, stream: str, seq: int, column: str, value: object) -> None:
        """Change one column of a row, its bytes and hash left as they are."""
        raise NotImplementedError

    def set_head_hash(self, stream: str, digest: bytes) -> None:
        """Change the hash the stream's head row says its last event has."""
        self._execute(
            self._sql("UPDATE streams SET last_hash = ? WHERE stream = ?"), (digest, stream)
        )

    def delete(self, stream: str, seq: int) -> None:
        """Delete an event from the rows."""
        raise NotImplementedError

    def move_out(self, stream: str, seq: int, data: bytes, digest: bytes) -> None:
        """Make event ``seq`` a row of its own, as a store of an earlier layout has its events
        moved (docs/event-log.md#stores): ``data``, its bytes of encoding 1 or 2, which hold
        the hash it follows; ``digest``, their hash."""
        raise NotImplementedError

    def delete_head(self, stream: str) -> None:
        """Delete the stream's head row, as if the stream had never been."""
        self._execute(self._sql("DELETE FROM streams WHERE stream = ?"), (stream,))

    def truncate(self, stream: str, seq: int, digest: bytes) -> None:
        """Delete the stream's events after ``seq`` and set its head to ``seq``, ``digest``."""
        raise NotImplementedError

    def set_blob(self, sha256: str, data: bytes) -> None:
        self._execute(self._sql("UPDATE blobs SET data = ? WHERE sha256 = ?"), (data, sha256))

    def delete_blob(self, sha256: str) -> None:
        self._execute(self._sql("DELETE FROM blobs WHERE sha256 = ?"), (sha256,))


def forge_tool_output(store: EventStore, tamper: Tamper, stream: str, output: str) -> int:
    """Do what an insider with write access to the store can: change the recorded output of
    the tool call, then re-hash that event and every later one, each linked to the one before,
    and set the stream's head (docs/event-log.md#signed-heads); return the seq changed. A
    signed head cannot be made again without the key: it is re-hashed as it is."""
    events = store.read(stream, resolve_blobs=False)
    target = next(e for e in events if isinstance(e.body, ToolCallCompleted))
    forged = msgspec.structs.replace(target.body, output=output)
    later = [msgspec.structs.replace(target, body=forged), *events[target.seq :]]
    tamper.set_head_hash(stream, tamper.rechain(stream, later, events[target.seq - 2].hash))
    return target.seq


def cut_back(store: EventStore, tamper: Tamper, stream: str, head: int) -> int:
    """Do what an insider with write access to the store can to hide a session's last tasks:
    delete its events after the ``HeadSigned`` at seq ``head`` and set the stream's head to it,
    so the chain and every signature left verify (docs/event-log.md#the-witness); return
    ``head``, the log's new last seq."""
    events = store.read(stream, resolve_blobs=False)
    tamper.truncate(stream, head, events[head - 1].hash)
    return head


BACKENDS = ["memory", "sqlite", "postgres"]


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def sqlite_tamper(path: Path) -> Tamper:
    """A tamper of the SQLite store at ``path`` (layout 5: ``appends``)."""
    return AppendsTamper(lambda: contextlib.closing(sqlite3.connect(path)), "?")


@dataclass
class _Append:
    """A row of ``appends`` as ``AppendsTamper`` edits it: its entries unpacked."""

    position: int
    first: int
    """The seq of its first event."""
    prev_hash: bytes | None
    """As the row keeps it: empty for a moved event; none (SQLite's) for the hash of the row
    before, ``follows``."""
    hash: bytes
    entries: list[bytes]
    """Its events' bytes: entries of encoding 3, or (a row an earlier layout's event was
    moved to, ``prev_hash`` empty) that event's bytes, kept as they are."""
    follows: bytes
    """The hash its first event follows."""
    content: bytes | None = None
    """SQLite's: the small blobs it keeps."""

    def hashes(self, stream: str) -> list[bytes]:
        """Its events' hashes, from the hash its first follows."""
        if self.prev_hash == b"":
            return [self.hash]  # a moved event: its bytes hold what it follows
        digest, prev, out = packing.chain(stream), self.follows, []
        for entry in self.entries:
            prev = digest(prev, entry)
            out.append(prev)
        return out

    def values(self) -> tuple[Any, ...]:
        """Its columns but its stream's, its entries packed again: ``(seq, count, position,
        prev_hash, hash, data)``."""
        last = self.first + len(self.entries) - 1
        data = self.entries[0]  # a moved event's bytes, as they are
        if self.prev_hash != b"":
            data = packing.pack(last, self.follows, self.entries, self.hash).data
        return (last, len(self.entries), self.position, self.prev_hash, self.hash, data)


class AppendsTamper(Tamper):
    """The same edits on a store of ``appends``, whose rows each hold an append's events
    (docs/event-log.md#encoding-3): an event's bytes are an entry, changed in the row that
    holds it, packed again; a column (stream, seq, count, position, prev_hash, hash) is the
    row's. No column says an event's type or version. PostgreSQL's rows name their stream;
    SQLite's give its key in ``names``, and keep their small content (``param`` ``?``)."""

    def __init__(self, connect: Callable[[], contextlib.AbstractContextManager[Any]], param: str):
        """``connect`` opens a connection to the store, whose work commits as it closes."""
        super().__init__(self._run, param)
        self._connect = connect
        self._sqlite = param == "?"
        self._stream = "(SELECT key FROM names WHERE name = ?)" if self._sqlite else "?"

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        with self._connect() as conn:
            yield conn
            conn.commit()

    def _run(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._connection() as conn:
            conn.execute(sql, params)

    def _holding(self) -> str:
        """Where ``appends`` has the row holding a stream's seq (``stream``, ``seq`` twice)."""
        return self._sql(f"stream = {self._stream} AND seq >= ? AND seq - count < ?")

    def encode(self, event: Event) -> bytes:
        """The entry of ``event`` (its ``prev_hash`` is its row's, or the entry before's)."""
        fields = (event.seq, event.at, event.v, event.body, event.conversation_id, event.task_id)
        return packing.encode_entry(packing.Entry(*fields))

    def hash(self, stream: str, prev: bytes, data: bytes) -> bytes:
        return packing.chain(stream)(prev, data)

    def _insert(self, conn: Any, stream: str, row: _Append) -> None:
        """Write ``row`` to ``appends`` on ``conn``, its entries packed again."""
        columns = "stream, seq, count, position, prev_hash, hash, data"
        values = (stream, *row.values())
        if self._sqlite:
            columns, values = columns + ", content", (*values, row.content)
        marks = ", ".join([self._stream, *["?"] * (len(values) - 1)])
        conn.execute(self._sql(f"INSERT INTO appends ({columns}) VALUES ({marks})"), values)

    @contextlib.contextmanager
    def _row(self, stream: str, seq: int) -> Iterator[tuple[Any, _Append]]:
        """The row holding ``stream``'s event ``seq``, in one transaction, written back as the
        caller leaves it (its seq and count its entries'; none left: deleted)."""
        with self._connection() as conn:
            columns = "position, seq, count, prev_hash, hash, data"
            found = conn.execute(
                f"DELETE FROM appends WHERE {self._holding()} RETURNING {columns}"
                + (", content" if self._sqlite else ""),
                (stream, seq, seq),
            ).fetchone()
            assert found is not None, f"stream {stream} has no row holding seq {seq}"
            position, last, count, prev, digest, data, *content = (
                bytes(v) if isinstance(v, memoryview) else v for v in found
            )
            entries = _entries(data, count)
            follows = prev
            if follows is None:  # the hash of the row before
                before = conn.execute(
                    self._sql(
                        f"SELECT hash FROM appends WHERE stream = {self._stream} AND seq < ? "
                    )
                    + "ORDER BY seq DESC LIMIT 1",
                    (stream, last - count + 1),
                ).fetchone()
                follows = bytes(before[0]) if before else GENESIS_HASH
            first = last - count + 1
            row = _Append(position, first, prev, digest, entries, follows, *content)
            yield conn, row
            if row.entries:
                self._insert(conn, stream, row)

    def set_data(
        self,
        stream: str,
        seq: int,
        data: bytes,
        digest: bytes | None = None,
        *,
        prev: bytes | None = None,
    ) -> None:
        """Change an event's entry; ``digest``, its hash, is kept if it is its row's last,
        and ``prev``, the hash it follows, if it is its row's first."""
        with self._row(stream, seq) as (_, row):
            at = seq - row.first
            row.entries[at] = data
            if digest is not None and at == len(row.entries) - 1:
                row.hash = digest
            if prev is not None and at == 0 and row.prev_hash:
                row.prev_hash = row.follows = prev

    def set_column(self, stream: str, seq: int, column: str, value: object) -> None:
        """Change one column of the row holding ``seq``, its bytes left as they are."""
        with self._connection() as conn:
            mark = "?"
            if column == "stream" and self._sqlite:  # the key of another stream's id
                conn.execute(NAME_SQL, (value,))
                mark = self._stream
            sql = self._sql(f"UPDATE appends SET {column} = {mark} WHERE ") + self._holding()
            conn.execute(sql, (value, stream, seq, seq))

    def delete(self, stream: str, seq: int) -> None:
        """Delete an event: the events before it in its row stay there, the row's hash now
        theirs; those after it, as they were, go in a row of their own."""
        with self._row(stream, seq) as (conn, row):
            self._cut(conn, stream, row, seq - row.first)

    def move_out(self, stream: str, seq: int, data: bytes, digest: bytes) -> None:
        """Put ``data`` in a row of its own in the event's place (``count`` 1, ``prev_hash``
        empty); the events before and after it in its row stay as they were, as ``delete``
        leaves them."""
        with self._row(stream, seq) as (conn, row):
            at = seq - row.first
            self._insert(conn, stream, _Append(row.position + at, seq, b"", digest, [data], b""))
            self._cut(conn, stream, row, at)

    def _cut(self, conn: Any, stream: str, row: _Append, at: int) -> None:
        """Take ``row``'s event ``at`` (its index) out of it: those before it stay, the row's
        hash now theirs; those after it, as they were, go in a row of their own."""
        hashes = row.hashes(stream)
        after = _Append(
            row.position + at + 1,
            row.first + at + 1,
            hashes[at],
            row.hash,
            row.entries[at + 1 :],
            hashes[at],
        )
        if after.entries:
            self._insert(conn, stream, after)
        del row.entries[at:]
        if at:
            row.hash = hashes[at - 1]

    def truncate(self, stream: str, seq: int, digest: bytes) -> None:
        with self._row(stream, seq) as (conn, row):
            conn.execute(
                self._sql(
                    f"DELETE FROM appends WHERE stream = {self._stream} AND seq - count >= ?"
                ),
                (stream, seq),
            )
            del row.entries[seq - row.first + 1 :]
            row.hash = digest
            conn.execute(
                self._sql("UPDATE streams SET last_seq = ?, last_hash = ? WHERE stream = ?"),
                (seq, digest, stream),
            )


def postgres_tamper(schema: str) -> AppendsTamper:
    """A tamper of the PostgreSQL store in ``schema`` (layout 5: ``appends``)."""

    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        import psycopg

        with psycopg.connect(POSTGRES_URL) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            yield conn

    return AppendsTamper(connect, "%s")


class MemoryTamper(AppendsTamper):
    """The same edits on ``MemoryStore``'s rows: rows of appends as PostgreSQL's are (each
    names its stream and keeps the hash its first event follows), in lists rather than a
    table (``Tables.rows`` in position order, ``Tables.by_stream`` each stream's in seq order),
    its head rows and blobs in dicts."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def _found(self, stream: str, seq: int) -> Packed:
        """The row holding ``stream``'s event ``seq``."""
        found = [
            r for r in self._store._tables.rows if r[1] == stream and r[2] >= seq > r[2] - r[3]
        ]
        assert found, f"stream {stream} has no row holding seq {seq}"
        return found[0]

    def _index(self, rows: list[Packed]) -> None:
        """Make ``rows`` the store's, found as a database's indexes would find them: in
        position order, and each stream's in seq order."""
        tables = self._store._tables
        tables.rows = sorted(rows, key=lambda row: row[0])
        tables.by_stream = {stream: [] for stream in tables.by_stream}
        for row in sorted(tables.rows, key=lambda row: row[2]):
            tables.by_stream.setdefault(row[1], []).append(row)

    @contextlib.contextmanager
    def _row(self, stream: str, seq: int) -> Iterator[tuple[Any, _Append]]:
        """The row holding ``stream``'s event ``seq``, with the store's other rows (a list
        ``_insert`` adds to), written back as the caller leaves it."""
        found = self._found(stream, seq)
        rows = [row for row in self._store._tables.rows if row is not found]
        position, _, last, count, prev, digest, data = found
        row = _Append(position, last - count + 1, prev, digest, _entries(data, count), prev)
        yield rows, row
        if row.entries:
            self._insert(rows, stream, row)
        self._index(rows)

    def _insert(self, conn: Any, stream: str, row: _Append) -> None:
        last, count, position, prev, digest, data = row.values()
        conn.append((position, stream, last, count, prev, digest, data))

    def set_column(self, stream: str, seq: int, column: str, value: object) -> None:
        found = self._found(stream, seq)
        at = ["position", "stream", "seq", "count", "prev_hash", "hash", "data"].index(column)
        changed = (*found[:at], value, *found[at + 1 :])
        self._index([changed if row is found else row for row in self._store._tables.rows])

    def truncate(self, stream: str, seq: int, digest: bytes) -> None:
        with self._row(stream, seq) as (rows, row):
            rows[:] = [r for r in rows if r[1] != stream or r[2] - r[3] < seq]
            del row.entries[seq - row.first + 1 :]
            row.hash = digest
        self._store._tables.heads[stream] = (seq, digest)

    def set_head_hash(self, stream: str, digest: bytes) -> None:
        self._store._tables.heads[stream] = (self._store._tables.heads[stream][0], digest)

    def delete_head(self, stream: str) -> None:
        del self._store._tables.heads[stream]

    def set_blob(self, sha256: str, data: bytes) -> None:
        self._store._tables.blobs[sha256] = data

    def delete_blob(self, sha256: str) -> None:
        del self._store._tables.blobs[sha256]


_RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])


def _entries(data: bytes, count: int) -> list[bytes]:
    """The entries of a row of appends holding ``count`` events, as ``data`` holds them: of
    encoding 3, or (a row an earlier layout's event was moved to) that event's bytes."""
    if not packing.is_packed(data):
        return [data]
    plain = packing.decompressed(data)
    # One entry is all of them: it may be bytes that are no msgpack (a test's).
    return [plain] if count == 1 else _split(plain, count)


def _split(plain: bytes, count: int) -> list[bytes]:
    """The ``count`` entries a row's decompressed bytes hold end to end."""
    return [bytes(raw) for raw in _RAWS.decode(b"\xdd" + count.to_bytes(4, "big") + plain)]


def kept_forms(path: Path, text: bytes) -> list[bytes]:
    """The bytes in which the SQLite store at ``path`` keeps ``text`` now: small content is
    kept compressed in its rows' ``content``, so each such column that holds it (whose bytes
    on disk show whether a copy is left after it is deleted); else ``text``."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT n.name, a.content FROM appends AS a JOIN names AS n ON n.key = a.stream "
            "WHERE a.content IS NOT NULL"
        ).fetchall()
    return [
        content
        for stream, content in rows
        if any(isinstance(b, bytes) and text in b for b in sqlite_content.unpack(stream, content))
    ] or [text]


def on_disk(path: Path, forms: list[bytes]) -> bool:
    """Whether any of ``forms`` is in the files of the SQLite store at ``path`` (its write-ahead
    log too), as they are on disk."""
    files = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    return any(form in files for form in forms)


LAYOUT_3 = [
    # Each stream's id and each type's name once, in ``names``; a row holds their keys.
    """CREATE TABLE log (
    position INTEGER PRIMARY KEY,
    stream   INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    type     INTEGER NOT NULL,
    v        INTEGER NOT NULL,
    data     BLOB    NOT NULL,
    hash     BLOB    NOT NULL,
    UNIQUE (stream, seq)
)""",
    "CREATE TABLE names (key INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    # What the rows say, with the stream's id and the type's name, as layout 1's table.
    """CREATE VIEW events AS
SELECT l.position, s.name AS stream, l.seq, t.name AS type, l.v, l.data, l.hash
FROM log AS l JOIN names AS s ON s.key = l.stream JOIN names AS t ON t.key = l.type""",
    # Writing to the view writes the rows (what an operator's SQL, or a prune, does).
    """CREATE TRIGGER events_insert INSTEAD OF INSERT ON events BEGIN
    INSERT OR IGNORE INTO names (name) VALUES (NEW.stream), (NEW.type);
    INSERT INTO log (position, stream, seq, type, v, data, hash) VALUES (NEW.position,
        (SELECT key FROM names WHERE name = NEW.stream), NEW.seq,
        (SELECT key FROM names WHERE name = NEW.type), NEW.v, NEW.data, NEW.hash);
END""",
    """CREATE TRIGGER events_update INSTEAD OF UPDATE ON events BEGIN
    INSERT OR IGNORE INTO names (name) VALUES (NEW.stream), (NEW.type);
    UPDATE log SET position = NEW.position,
        stream = (SELECT key FROM names WHERE name = NEW.stream), seq = NEW.seq,
        type = (SELECT key FROM names WHERE name = NEW.type), v = NEW.v, data = NEW.data,
        hash = NEW.hash
    WHERE position = OLD.position;
END""",
    """CREATE TRIGGER events_delete INSTEAD OF DELETE ON events BEGIN
    DELETE FROM log WHERE position = OLD.position;
END""",
]
"""How a store of layout 3 keeps its events (plait made new stores so before layout 4): a
stream's id and a type's name as keys in ``names``, the ``events`` view reading as layout 1's
table did, writing to it writing ``log``."""


def layout_3(path: Path) -> Path:
    """Make ``path`` an empty store of layout 3, as plait made it then (``SqliteStore``
    opens it and goes on in its ``log``)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        for statement in [*LAYOUT_3, *SCHEMA.split(";")]:
            if statement.strip():
                db.execute(statement)
        db.execute("PRAGMA user_version=3")
        db.commit()
    return path


class StoreFactory:
    """Opens stores of one backend, all on the same underlying database."""

    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend = backend
        self.path = tmp_path / "plait.db"
        self.schema = f"plait_test_{uuid.uuid4().hex[:12]}"
        self.clock = TickClock()
        self._memory: MemoryStore | None = None
        self._opened: list[EventStore] = []

    def open(self, **kwargs: Any) -> EventStore:
        kwargs.setdefault("clock", self.clock)
        if self.backend == "memory":
            if self._memory is None:
                self._memory = MemoryStore(**kwargs)
            store: EventStore = self._memory
        elif self.backend == "sqlite":
            store = SqliteStore(self.path, **kwargs)
        else:
            from plait.events.stores import PostgresStore

            try:
                store = PostgresStore(POSTGRES_URL, schema=self.schema, **kwargs)
            except Exception as exc:  # the suite must fail, not skip, when Postgres is missing
                pytest.fail(  # it answered as the run began (docs/testing.md): it went away
                    f"PostgreSQL at {POSTGRES_URL} is needed by the contract tests: {exc}",
                    pytrace=False,
                )
        self._opened.append(store)
        return store

    @property
    def url(self) -> str:
        """What ``--store`` (or ``Runtime``) is given to open this factory's database."""
        if self.backend == "sqlite":
            return str(self.path)
        assert self.backend == "postgres", "a memory store has no URL another process opens"
        return f"{POSTGRES_URL}?schema={self.schema}"

    @property
    def tamper(self) -> Tamper:
        if self.backend == "memory":
            assert self._memory is not None
            return MemoryTamper(self._memory)
        if self.backend == "sqlite":
            return sqlite_tamper(self.path)
        return postgres_tamper(self.schema)

    def close(self) -> None:
        for store in self._opened:
            store.close()
        if self.backend == "postgres":
            _drop_schema(self.schema)


def wait_for_event(
    store: EventStore, stream: str, kind: type, *, after: int = 0, timeout: float = 60
) -> Event:
    """The first event of ``kind`` in ``stream`` past seq ``after``, waited for as the store's
    subscribers are woken (whichever process appends it)."""
    with store.subscribe() as tail:
        while (event := tail.get(timeout=timeout)) is not None:
            if event.stream == stream and isinstance(event.body, kind) and event.seq > after:
                return event
    raise AssertionError(f"no {kind.__name__} in session {stream} within {timeout} s")


@contextlib.contextmanager
def read_only_dir(source: Path, mount: Path) -> Iterator[Path]:
    """``source`` seen at ``mount``, a directory nobody may write, root included.

    root ignores file permissions, so as root it is a read-only bind mount of ``source``
    (the test skips where it may not mount); otherwise ``source`` itself, its permissions
    taken away for the while.
    """
    if os.geteuid() != 0:
        modes = {path: path.stat().st_mode for path in [source, *source.iterdir()]}
        for path in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield source
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    mount.mkdir()
    bind = ["mount", "--bind", "-o", "ro", str(source), str(mount)]
    if shutil.which("mount") is None or subprocess.run(bind, capture_output=True).returncode:
        pytest.skip("root may not mount here, and without a mount root may write anywhere")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@contextlib.contextmanager
def process(
    stores: StoreFactory, server: ScriptedModelServer, name: str, **kwargs: Any
) -> Iterator[Runtime]:
    """A runtime with a store connection and heartbeat of its own, as another process has."""
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="m", backoff_sec=0.01)
    runtime = Runtime(
        stores.open(),
        RuntimeSettings(model=settings, owner_id=name, expire_every_sec=None, **kwargs),
    )
    try:
        yield runtime
    finally:
        runtime.close()


BENCH = Path(__file__).parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module, for a test that runs a smaller run of its bench. It is
    run with ``bench/`` first on ``sys.path`` (its table printer, its helpers), which is then
    undone, or ``bench/mcp.py`` would hide the ``mcp`` package."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    path = sys.path[:]
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
    return module
