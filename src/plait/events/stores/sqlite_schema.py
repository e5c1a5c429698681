"""What ``SqliteStore`` keeps in its file: the tables, by layout (docs/event-log.md#stores).

Layout 1 had the ``events`` table, the ``streams`` heads and the ``blobs``; layout 2 added the
``leases`` and the ``inbox``. Layout 3 kept events in ``log``, each row with its stream's id
and its type's name as keys in ``names``, and shows them as layout 1's table did through the
``events`` view (docs/storage.md#the-bytes-of-one-turn). Layout 4 keeps a new store's events
in ``groups``, a row per append (``sqlite_groups.py``). A store of an earlier layout keeps
its table of events, and goes on in it.
"""

from __future__ import annotations

__all__ = ["GAPS_SQL", "LAST_POSITION_SQL", "ROWS_SQL", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA_VERSION = 4
"""The layout a new store is made in; one of an earlier layout is brought up to this version
(its missing tables made) but keeps its ``events`` table."""

SCHEMA = """
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


_LAST = {"events": "position", "log": "position", "groups": "position + count - 1"}
"""The last position a row holds, by table."""

GAPS_SQL = {
    table: "SELECT before, position FROM (SELECT position, "
    f"coalesce(lag({last}) OVER (ORDER BY position), 0) AS before FROM {table}) "
    "WHERE position != before + 1 ORDER BY position"
    for table, last in _LAST.items()
}
"""Every position that does not follow the one before it (from 0), and that one, by the
table of rows."""

LAST_POSITION_SQL = {
    table: f"SELECT coalesce((SELECT {last} FROM {table} ORDER BY position DESC LIMIT 1), 0)"
    for table, last in _LAST.items()
}
"""The last position stored (0: none), by the table of rows."""

ROWS_SQL = {
    # The index finds the rows; their columns are read from the rows themselves (SQLite
    # would read an indexed column from the index), so a read checks what the rows hold.
    "events": "SELECT t.position, t.data, t.hash, t.stream, t.seq, t.type, t.v "
    "FROM events AS i CROSS JOIN events AS t "
    "ON t.position = i.position WHERE i.stream = ? AND i.seq > ? AND i.seq <= ? "
    "ORDER BY i.seq LIMIT ?",
    "log": "SELECT t.position, t.data, t.hash, s.name, t.seq, n.name, t.v "
    "FROM log AS i CROSS JOIN log AS t ON t.position = i.position "
    "JOIN names AS s ON s.key = t.stream JOIN names AS n ON n.key = t.type "
    "WHERE i.stream = (SELECT key FROM names WHERE name = ?) AND i.seq > ? AND i.seq <= ? "
    "ORDER BY i.seq LIMIT ?",
}
"""A stream's rows after a seq, in either layout."""
