"""``SqliteInbox``: the commands stored for a SQLite store's sessions (``plait.events._inbox``).

This is an internal part of ``SqliteStore``, not part of the public API.
"""

from __future__ import annotations

from collections.abc import Callable

from plait.events._inbox import Inbox
from plait.events._subscription import Signal, Waiter
from plait.events.stores._sqlite_files import FileWaiter
from plait.events.stores._sqlite_link import Link

__all__ = ["SqliteInbox"]


class SqliteInbox(Inbox):
    """A SQLite store's inbox, its ``inbox`` table."""

    def __init__(self, link: Link) -> None:
        super().__init__()
        self._link = link

    def waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        return FileWaiter(self._link.data_version, self._here(also))  # any commit wakes it

    def _put(self, stream: str, data: bytes) -> int:
        with self._link.transaction() as db:
            cur = db.execute("INSERT INTO inbox (stream, data) VALUES (?, ?)", (stream, data))
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        where = "" if streams is None else f" WHERE stream IN ({', '.join('?' * len(streams))})"
        rows = self._link.query(
            "SELECT id, stream, data FROM inbox" + where + " ORDER BY id", tuple(streams or ())
        )
        return [(int(i), str(s), bytes(d)) for i, s, d in rows]

    def _drop(self, taken: list[tuple[str, int]]) -> None:
        with self._link.transaction() as db:
            db.executemany("DELETE FROM inbox WHERE stream = ? AND id = ?", taken)
