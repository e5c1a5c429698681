"""What others ask of a session's owner: the inbox, a part of every store (``EventStore.inbox``).

The **inbox** holds commands for a session that any process may store (durably, in order): a
task, an interrupt, a conversation's destruction. The owner (``plait.events._leases``) takes
them in order and deletes each once what it leads to is in the log; a task is queued once by
its id, an interrupt acted on once by its key. See ``docs/processes.md``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

import msgspec

from plait.events._subscription import ConditionWaiter, Signal, Waiter
from plait.events._values import TaskPlan

__all__ = [
    "Command",
    "CommandBody",
    "DestroyConversation",
    "Inbox",
    "InterruptTask",
    "StoredCommand",
    "SubmitTask",
]


class SubmitTask(msgspec.Struct, frozen=True, tag="submit"):
    """Queue a task (a prompt, a context change, a compaction) in the session."""

    plan: TaskPlan


class InterruptTask(msgspec.Struct, frozen=True, tag="interrupt"):
    """Interrupt the session's running task (if any, when the owner takes the command)."""

    key: str = ""
    """Unique to this interrupt (a random id; ``""``: one stored by an older plait): the owner
    acts on a key once, however often it is stored
    (docs/processes.md#each-command-takes-effect-once)."""


class DestroyConversation(msgspec.Struct, frozen=True, tag="destroy"):
    """Destroy a conversation of the session."""

    conversation_id: str


CommandBody = SubmitTask | InterruptTask | DestroyConversation


class Command(msgspec.Struct, frozen=True):
    """A command as stored: who asked, and what."""

    body: CommandBody
    sender: str = ""
    """The process that stored it (for people)."""


class StoredCommand(msgspec.Struct, frozen=True):
    """A command in the inbox: its place in the inbox's order, and its session."""

    id: int
    stream: str
    command: Command


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Command).decode


class Inbox(ABC):
    """A store's inbox: commands kept in order for each session's owner until it drops them."""

    def __init__(self) -> None:
        self._stored = Signal()  # commands stored through this object: appends wake no owner

    def put(self, stream: str, command: Command) -> int:
        """Store ``command`` for ``stream``'s owner; return its id once it is durable. Made
        again after a lost answer, it is stored once
        (docs/processes.md#each-command-takes-effect-once)."""
        command_id = self._put(stream, _encode(command))
        self._stored.notify()
        return command_id

    def commands(self, *streams: str) -> list[StoredCommand]:
        """The inbox in order: the commands of ``streams``, or (none named) every session's."""
        rows = self._commands(list(streams) if streams else None)
        return [StoredCommand(cid, found, _decode(data)) for cid, found, data in rows]

    def waiter(
        self, also: Signal | None = None, sessions: Callable[[str], bool] | None = None
    ) -> Waiter:
        """A waiter (``token``, ``wait``) woken when any process may have stored a command, or
        when ``also`` moves. With ``sessions``, a command of a session it says no to wakes it
        no more where the store tells whose each command is (PostgreSQL); elsewhere any may."""
        return ConditionWaiter(self._here(also))

    def drop(self, commands: Iterable[StoredCommand]) -> None:
        """Delete commands the owner has taken (one already gone is ignored)."""
        taken = [(command.stream, command.id) for command in commands]
        if taken:
            self._drop(taken)

    def hear(self, hear: Callable[[], object]) -> None:
        """Call ``hear`` (a bound method, held weakly) each time a command is stored through
        this object."""
        self._stored.heard_by(hear)

    def _here(self, also: Signal | None) -> Signal:
        """What moves when a command is stored through this object, or ``also`` moves."""
        return self._stored if also is None else Signal.any_of(self._stored, also)

    @abstractmethod
    def _put(self, stream: str, data: bytes) -> int:
        """Store the encoded command ``data`` for ``stream``, once however often it is made;
        return its id once durable."""

    @abstractmethod
    def _commands(self, streams: list[str] | None) -> list[tuple[int, str, bytes]]:
        """``(id, stream, data)`` of the commands of ``streams`` (``None``: all), by id."""

    @abstractmethod
    def _drop(self, taken: list[tuple[str, int]]) -> None:
        """Delete the commands ``(stream, id)``."""
