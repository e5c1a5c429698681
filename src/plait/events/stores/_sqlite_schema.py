"""What ``SqliteStore`` keeps in its file (docs/event-log.md#stores): layout 5.

A row of ``appends`` holds an append's events, of encoding 3 (``plait.events._packing``), as a
row of PostgreSQL's ``appends`` does: its first event's position, its stream (by its key in
``names``), its last event's seq, how many events it holds, the hash its first event follows
and its last event's hash, and its entries compressed. The hash its first event follows is the
last hash of the stream's row before it, so a row keeps none (``prev_hash`` NULL: 32 bytes an
append, a tenth of a turn's), and a read finds it there. ``content`` keeps the small blobs the
append made (``_sqlite_content.py``), found through ``contents``. A store of an earlier layout
is moved into this one when it is first opened for writing (``_sqlite_legacy.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "ALL_SQL",
    "GAPS_SQL",
    "LAST_POSITION_SQL",
    "NAME_SQL",
    "ROWS_SQL",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STORED_SQL",
    "Query",
]

Query = Callable[[str, tuple[object, ...]], list[tuple[Any, ...]]]
"""The store's connection, asked one statement: its rows."""

SCHEMA_VERSION = 5
"""The layout of a store this plait writes; one of an earlier layout is moved into it."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS appends (
    position  INTEGER PRIMARY KEY,
    stream    INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    prev_hash BLOB,
    hash      BLOB    NOT NULL,
    data      BLOB    NOT NULL,
    content   BLOB,
    UNIQUE (stream, seq)
);
CREATE TABLE IF NOT EXISTS names (
    name TEXT    PRIMARY KEY,
    key  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS contents (
    key      INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (key, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS streams (
    stream    TEXT    PRIMARY KEY,
    last_seq  INTEGER NOT NULL,
    last_hash BLOB    NOT NULL,
    created   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT    PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB
);
CREATE TABLE IF NOT EXISTS leases (
    stream  TEXT    PRIMARY KEY,
    owner   TEXT,
    epoch   INTEGER NOT NULL,
    expires REAL    NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inbox (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT    NOT NULL,
    data   BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_stream ON inbox (stream, id);
"""
"""``names`` gives each stream id a key (``NAME_SQL``); ``contents`` finds the row that keeps
a small blob by the first 4 bytes of its sha-256, as a signed integer (``sqlite_content``)."""

NAME_SQL = "INSERT OR IGNORE INTO names (name, key) SELECT ?, coalesce(max(key), 0) + 1 FROM names"
"""Give a stream id the next key (an insert at a time, in a write transaction)."""

_COLUMNS = (
    "t.position, n.name, t.seq, t.count, coalesce(t.prev_hash, (SELECT p.hash FROM appends AS p "
    "WHERE p.stream = t.stream AND p.seq < t.seq ORDER BY p.seq DESC LIMIT 1), zeroblob(32)), "
    "t.hash, t.data"
)
"""A row as reads take it (``plait.events._stored.Packed``), its ``prev_hash`` the hash of its
stream's row before it where it keeps none (``GENESIS_HASH`` for the first). Its columns are
read from the row itself, not from the index that found it (SQLite would read an indexed column
from the index), so a read checks what the rows hold."""

ROWS_SQL = (
    "WITH s (key) AS (SELECT key FROM names WHERE name = ?1) "
    f"SELECT {_COLUMNS} FROM s CROSS JOIN appends AS i "
    "CROSS JOIN appends AS t ON t.position = i.position JOIN names AS n ON n.key = t.stream "
    "WHERE i.stream = s.key AND i.seq >= ?2 AND i.seq <= coalesce((SELECT a.seq FROM s "
    "CROSS JOIN appends AS a WHERE a.stream = s.key AND a.seq >= ?3 ORDER BY a.seq LIMIT 1), ?3) "
    "ORDER BY i.seq LIMIT ?4"
)
"""A stream's rows holding seqs ``?2`` to ``?3``, at most ``?4``."""

ALL_SQL = (
    "WITH r AS (SELECT position, count, sum(count) OVER w - count "
    "- max(?1 - first_value(position) OVER w + 1, 0) AS before FROM (SELECT position, count "
    "FROM appends WHERE position >= coalesce((SELECT max(position) FROM appends "
    "WHERE position <= ?1), 0) ORDER BY position LIMIT ?3) WINDOW w AS (ORDER BY position)) "
    f"SELECT {_COLUMNS} FROM r CROSS JOIN appends AS t ON t.position = r.position "
    "JOIN names AS n ON n.key = t.stream WHERE r.before < ?2 AND r.position + r.count > ?1 + 1 "
    "ORDER BY t.position"
)
"""The rows holding positions after ``?1`` (the row holding it too), at most ``?3``, and of
them only those that hold some of the first ``?2`` events after it (``before``: how many the
rows before a row hold; a row's positions follow each other from its own). They are chosen by
their positions and counts before any row's bytes are read: a row may hold a thousand
events."""

LAST_POSITION_SQL = (
    "SELECT coalesce((SELECT position + count - 1 FROM appends ORDER BY position DESC LIMIT 1), 0)"
)
"""The last position stored (0: none)."""

GAPS_SQL = (
    "SELECT before, position FROM (SELECT position, "
    "coalesce(lag(position + count - 1) OVER (ORDER BY position), 0) AS before FROM appends) "
    "WHERE position != before + 1 ORDER BY position"
)
"""Every position that does not follow the one before it (from 0), and that one."""

STORED_SQL = (
    "SELECT coalesce(sum(length(data) + coalesce(length(prev_hash), 0) + length(hash)), 0) "
    "FROM appends "
    "WHERE stream = (SELECT key FROM names WHERE name = ?)"
)
"""The bytes of a stream's events as its rows keep them (their content apart)."""
