"""``PostgresStore``'s inbox: commands stored once, however their answers are lost.

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
from typing import Any

from plait.errors import StoreError
from plait.events.stores.postgres_link import Connection
from plait.events.subscription import Signal

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


class PostgresInbox:
    """``PostgresStore``'s part of ``plait.events.ownership.Ownership``: the inbox."""

    url: str
    schema: str
    inbox_channel: str
    _sql: dict[str, bytes]
    _run: Callable[..., Any]
    _commanded: Signal

    def _put_command(self, stream: str, data: bytes) -> int:
        sent: list[tuple[int, int, int]] = []  # (id, transaction, server pid), once answered

        def put(conn: Connection) -> int:
            sent.clear()
            with conn.transaction():
                found = conn.execute(self._sql["put_command"], (stream, data)).fetchone()
                assert found is not None
                sent.append((int(found[0]), int(found[1]), int(found[2])))
                conn.execute(self._sql["notify"], (self.inbox_channel, announcement(stream)))
            return int(found[0])

        def landed(conn: Connection) -> int | None:
            # The insert answered, so its COMMIT may have been sent: whether that transaction
            # committed is the answer, however soon the owner took the command and deleted it.
            if sent:
                command_id, xact, pid = sent[0]
                try:
                    done = committed(conn, self._sql, xact, pid)
                except StoreError as exc:
                    raise StoreError(
                        f"{self.url} (schema {self.schema}): session {stream}: {exc}"
                    ) from None
                if done is not None:
                    return command_id if done else None
            # Not answered: nothing of this try committed; the same bytes (a command is unique
            # by its task's id or its key, and its sender) are another try's.
            found = conn.execute(self._sql["command_of"], (stream, data)).fetchone()
            return None if found is None else int(found[0])

        command_id: int = self._run(put, landed)
        self._commanded.notify()
        return command_id

    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        def commands(conn: Connection) -> list[tuple[int, str, bytes]]:
            if streams is None:
                rows = conn.execute(self._sql["commands"], binary=True)
            else:
                rows = conn.execute(self._sql["commands_of"], (streams,), binary=True)
            return [(int(i), str(s), bytes(d)) for i, s, d in rows]

        found: list[tuple[int, str, bytes]] = self._run(commands)
        return found

    def _drop_commands(self, taken: list[tuple[str, int]]) -> None:
        streams, ids = (list(column) for column in zip(*taken, strict=True))
        self._run(lambda conn: conn.execute(self._sql["drop_commands"], (streams, ids)))
