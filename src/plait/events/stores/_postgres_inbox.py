"""``PostgresInbox``: a PostgreSQL store's inbox (``plait.events._inbox``): commands stored
once, however their answers are lost.

This is an internal part of ``PostgresStore``, not part of the public API.

A command is inserted and announced (``NOTIFY``) in one transaction. If the connection is cut
once the insert has answered, the ``COMMIT`` may have reached the server and its answer been
lost, and by the time the caller is connected again the owner may have taken the command and
deleted its row: looking for the row cannot tell. The insert therefore answers with its
transaction's id and its server process, and the retry asks the server whether that
transaction committed (docs/processes.md#each-command-takes-effect-once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from plait._errors import StoreError
from plait.events._inbox import Inbox
from plait.events._subscription import Signal, Waiter
from plait.events.stores._postgres_calls import Calls
from plait.events.stores._postgres_link import Connection

__all__ = ["PostgresInbox", "announced", "announcement", "committed"]


_MAX_PAYLOAD = 4000
"""The longest session id a command is announced with, in bytes (PostgreSQL takes payloads of
up to 8,000 bytes); one longer is announced with none, which wakes every owner."""


def announcement(stream: str) -> str:
    """The payload a command for ``stream`` is announced with: its session, so that only its
    owner is woken (``announced``)."""
    return stream if len(stream.encode()) <= _MAX_PAYLOAD else ""


def announced(sessions: Callable[[str], bool] | None) -> Callable[[str], bool] | None:
    """Which payloads on the inbox channel wake a waiter for the commands of ``sessions``
    (``None``: every one). An empty payload, or one of digits only (an older plait announced
    the command's id), may be any session's: it wakes it."""
    if sessions is None:
        return None
    wanted = sessions
    return lambda payload: not payload or payload.isdigit() or wanted(payload)


def committed(conn: Connection, queries: Mapping[str, bytes], xact: int, pid: int) -> bool | None:
    """Whether transaction ``xact``, run by server process ``pid`` on a connection since cut,
    committed (``None``: the server no longer knows, it is that old). One the server still
    runs (it has not yet seen the connection go) is ended first: it then commits or aborts
    at once. Raise ``StoreError`` if it runs on all the same."""
    for _ in range(2):
        ((status,),) = conn.execute(queries["xact_status"], (xact,)).fetchall()
        if status != "in progress":
            return None if status is None else status == "committed"
        conn.execute(queries["end_xact"], (pid, xact))
    raise StoreError(
        f"cannot tell whether a command was stored: its transaction {xact} (server process "
        f"{pid}) still runs"
    )


Listen = Callable[[Signal, Callable[[str], bool] | None], Waiter]
"""A waiter on the inbox channel's announcements whose payload passes the filter given (all,
if ``None``), and on a local signal, closed with the store."""


class PostgresInbox(Inbox):
    """A PostgreSQL store's inbox, in its schema's ``inbox`` table, each command announced on
    ``channel`` with its session."""

    def __init__(self, calls: Calls, channel: str, listen: Listen) -> None:
        super().__init__()
        self._calls = calls
        self._channel = channel
        self._listen = listen

    def waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        return self._listen(self._here(also), announced(sessions))

    def _put(self, stream: str, data: bytes) -> int:
        sent: list[tuple[int, int, int]] = []  # (id, transaction, server pid), once answered
        queries = self._calls.sql

        def put(conn: Connection) -> int:
            sent.clear()
            with conn.transaction():
                found = conn.execute(queries["put_command"], (stream, data)).fetchone()
                assert found is not None
                sent.append((int(found[0]), int(found[1]), int(found[2])))
                conn.execute(queries["notify"], (self._channel, announcement(stream)))
            return int(found[0])

        def landed(conn: Connection) -> int | None:
            # The insert answered, so its COMMIT may have been sent: whether that transaction
            # committed is the answer, however soon the owner took the command and deleted it.
            if sent:
                command_id, xact, pid = sent[0]
                try:
                    done = committed(conn, queries, xact, pid)
                except StoreError as exc:
                    raise StoreError(
                        f"{self._calls.url} (schema {self._calls.schema}): session {stream}: {exc}"
                    ) from None
                if done is not None:
                    return command_id if done else None
            # Not answered: nothing of this try committed; the same bytes (a command is unique
            # by its task's id or its key, and its sender) are another try's.
            found = conn.execute(queries["command_of"], (stream, data)).fetchone()
            return None if found is None else int(found[0])

        return self._calls.run(put, landed)

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        queries = self._calls.sql

        def commands(conn: Connection) -> list[tuple[int, str, bytes]]:
            if streams is None:
                rows = conn.execute(queries["commands"], binary=True)
            else:
                rows = conn.execute(queries["commands_of"], (streams,), binary=True)
            return [(int(i), str(s), bytes(d)) for i, s, d in rows]

        return self._calls.run(commands)

    def _drop(self, taken: list[tuple[str, int]]) -> None:
        streams, ids = (list(column) for column in zip(*taken, strict=True))
        drop = self._calls.sql["drop_commands"]
        self._calls.run(lambda conn: conn.execute(drop, (streams, ids)))
