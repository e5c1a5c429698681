"""The one place ``SqliteStore`` knows its earlier layouts: it moves their events into layout 5.

A store of layout 1 or 2 kept a row per event in ``events``; of layout 3, in ``log``, with its
streams' ids and types' names as keys in ``names``, read through the ``events`` view; of layout
4, a row per append in ``groups``, compressed after the rows before it
(``_sqlite_groups.py``). Opened for writing, such a store is moved once, in one transaction,
into ``appends`` (``_sqlite_schema.py``), as PostgreSQL's are (``_postgres_legacy.py``): each
event goes into a row of its own, its bytes of encoding 1 or 2 verbatim and its ``prev_hash``
column empty, so every hash, signature and witness line still verifies, and the stream goes on
in encoding 3. Layout 4's small content goes with the row of its append's first event, where
``contents`` already finds it. Opened read-only, the store is left as it is, and the same move
fills temporary tables that the open reads instead.

Why a move and not a reader of each layout: every read (a window, the reads across streams,
``verify``, prune, usage) would branch on the layout, as SQLite's reads did on four tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from plait.events.stores._sqlite_content import pack_content
from plait.events.stores._sqlite_groups import stream_events, unpack_content
from plait.events.stores._sqlite_schema import SCHEMA

__all__ = ["layout_of", "move"]

_MOVED_SQL = (
    "INSERT INTO {target}.appends (position, stream, seq, count, prev_hash, hash, data, content) "
    "SELECT e.position, n.key, e.seq, 1, x'', e.hash, e.data, NULL FROM ({rows}) AS e "
    "JOIN {target}.names AS n ON n.name = e.stream"
)
"""Every event of a layout of a row per event into a row of its own."""

_EVENTS = {
    1: "SELECT position, stream, seq, data, hash FROM main.events",
    3: "SELECT l.position, s.name AS stream, l.seq, l.data, l.hash FROM main.log AS l "
    "JOIN main.{names} AS s ON s.key = l.stream",
}
"""Layout 1's and layout 3's events, with their streams' ids."""


def layout_of(db: sqlite3.Connection) -> int:
    """The layout the file's events are in: 1 (or 2), 3, 4, or 5."""
    tables = {
        name for (name,) in db.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")
    }
    for table, layout in (("appends", 5), ("groups", 4), ("log", 3), ("events", 1)):
        if table in tables:
            return layout
    return 5  # a new store


def move(db: sqlite3.Connection, layout: int, *, temporary: bool = False) -> None:
    """Move the events of a store of ``layout`` (1 to 4) into ``appends``, in the caller's
    write transaction, and drop their old tables; or, ``temporary``, into temporary tables
    (the file left as it is: a read-only open)."""
    target = "temp" if temporary else "main"
    names = "names"
    if layout == 3 and not temporary:  # its ``names`` has another shape: out of the way
        db.execute("DROP VIEW main.events")  # (its triggers with it)
        db.execute("ALTER TABLE main.names RENAME TO names_3")
        names = "names_3"
    _create(db, target, layout)
    if layout == 4:
        _move_groups(db, target)
    else:
        events = _EVENTS[layout].format(names=names)
        db.execute(
            f"INSERT OR IGNORE INTO {target}.names (name, key) "
            f"SELECT stream, row_number() OVER (ORDER BY min(position)) FROM ({events}) "
            "GROUP BY stream"
        )
        db.execute(_MOVED_SQL.format(target=target, rows=events))
    if temporary:
        return
    for table in {1: ["events"], 3: ["log", "names_3"], 4: ["groups"]}[layout]:
        db.execute(f"DROP TABLE main.{table}")


def _create(db: sqlite3.Connection, target: str, layout: int) -> None:
    """Make the tables of layout 5 in ``target``: in ``main``, those missing; in ``temp``,
    ``appends``, and ``names`` and ``contents`` unless the file's (layout 4's) serve."""
    for statement in SCHEMA.split(";"):
        words = statement.split()
        if not words:
            continue
        if target == "temp":
            if words[:2] != ["CREATE", "TABLE"] or words[5] not in ("appends", "names", "contents"):
                continue
            if layout == 4 and words[5] != "appends":
                continue
            statement = statement.replace("CREATE TABLE", "CREATE TEMP TABLE", 1)
        db.execute(statement)


def _move_groups(db: sqlite3.Connection, target: str) -> None:
    """Layout 4's rows, each event into a row of its own, in ``target``'s ``appends`` (the
    file's ``names`` are already layout 5's)."""
    streams = [str(name) for (name,) in db.execute("SELECT name FROM main.names ORDER BY key")]
    db.executemany(
        f"INSERT INTO {target}.appends (position, stream, seq, count, prev_hash, hash, data) "
        "SELECT ?, key, ?, 1, x'', ?, ? FROM main.names WHERE name = ?",
        _events(db, streams),
    )
    rows = db.execute(
        "SELECT g.position, n.name, g.content FROM main.groups AS g "
        "JOIN main.names AS n ON n.key = g.stream WHERE g.content IS NOT NULL"
    ).fetchall()
    db.executemany(
        f"UPDATE {target}.appends SET content = ? WHERE position = ?",
        [(_content(str(stream), bytes(content)), position) for position, stream, content in rows],
    )


def _events(db: sqlite3.Connection, streams: list[str]) -> Iterator[tuple[object, ...]]:
    """Layout 4's events, each as its row of layout 1 held it (its whole bytes and hash; a
    row that does not hold what its hash says gives each of its events a hash no bytes
    match, so ``verify`` names it as it did)."""

    for stream in streams:
        for position, seq, data, digest in stream_events(db, stream):
            yield position, seq, digest, data, stream


def _content(stream: str, content: bytes) -> bytes:
    """Layout 4's content of a row of ``stream``, compressed as layout 5's (kept as it is if
    it cannot be read: the blobs it held are missing either way)."""
    try:
        return pack_content(stream, unpack_content(stream, content))
    except ValueError:
        return content
