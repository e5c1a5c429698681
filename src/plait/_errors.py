"""The one exception tree of plait: every error a user can see is a ``PlaitError``.

Messages say where (store, stream, seq) and what was expected; the same facts are kept as
attributes so callers can act on them without parsing text.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "BlobMissingError",
    "BundleError",
    "ConcurrencyError",
    "ConfigError",
    "ContentUnavailableError",
    "CorruptEventError",
    "DivergenceError",
    "EffectLoopClosedError",
    "ErasureError",
    "IllegalTransitionError",
    "InvalidInputError",
    "KeyFileError",
    "LeaseLostError",
    "McpError",
    "ModelError",
    "ModelErrorKind",
    "NotFoundError",
    "PlaitError",
    "PrunedSessionError",
    "ReplayError",
    "SessionClosedError",
    "SessionFailedError",
    "StoreError",
    "StoreUnavailableError",
    "TamperedError",
    "TelemetryError",
    "ToolError",
    "TransientEventError",
    "UnknownConversationError",
    "UnknownEventTypeError",
    "UnknownSessionError",
    "WitnessError",
    "undecoded_byte",
]


class PlaitError(Exception):
    """Base of every error plait raises on purpose."""


class StoreError(PlaitError):
    """The event store refused or failed an operation."""


class StoreUnavailableError(StoreError):
    """The store cannot be opened or reached (missing file, not a database, server down)."""


class ConcurrencyError(StoreError):
    """An append expected a stream position that another writer has already moved past."""

    def __init__(self, stream: str, expected_seq: int, actual_seq: int) -> None:
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"stream {stream}: append expected last seq {expected_seq}, but the stream is at "
            f"seq {actual_seq} (another writer appended first; reload and retry)"
        )


class LeaseLostError(StoreError):
    """A process wrote to, or acted for, a session whose lease another process has taken: it no
    longer owns the session (see ``docs/processes.md``)."""

    def __init__(self, stream: str, epoch: int, detail: str = "") -> None:
        self.stream = stream
        self.epoch = epoch
        super().__init__(
            f"session {stream}: this process no longer owns it (its lease, epoch {epoch}, "
            f"was taken over{': ' + detail if detail else ''}); nothing was appended"
        )


class CorruptEventError(StoreError):
    """A stored event cannot be read back: bad bytes, a gap, or a broken hash chain."""

    def __init__(self, stream: str, seq: int | None, reason: str) -> None:
        self.stream = stream
        self.seq = seq
        self.reason = reason
        where = f"stream {stream} seq {seq}" if seq is not None else f"stream {stream}"
        super().__init__(f"{where}: {reason}")


class TamperedError(CorruptEventError):
    """A stored event is not what was written: its bytes do not match their hash, or it does
    not link to the event before it. Every read checks this (docs/event-log.md#checked-reads)."""


class UnknownEventTypeError(CorruptEventError):
    """A stored event names a type or version this plait cannot read."""

    def __init__(self, stream: str, seq: int | None, type_name: str, version: int) -> None:
        self.type_name = type_name
        self.version = version
        super().__init__(
            stream,
            seq,
            f"unknown event type {type_name!r} version {version} "
            "(written by a newer plait, or no upcaster is registered for it)",
        )


class BlobMissingError(StoreError):
    """An event references a blob that is neither stored nor redacted."""

    def __init__(self, sha256: str, where: str) -> None:
        self.sha256 = sha256
        super().__init__(f"{where}: blob sha256:{sha256} is missing from the store")


class TransientEventError(StoreError, TypeError):
    """A transient notification (a delta) was handed to a store, which never persists them."""


class ConfigError(PlaitError):
    """A configuration file, key or value is wrong."""


class KeyFileError(PlaitError):
    """A signing or public key file cannot be read, made or used; the message names the file,
    never what it holds (docs/event-log.md#signed-heads)."""


class BundleError(PlaitError):
    """An evidence bundle cannot be written or read: it exists already, or it is damaged (a
    byte changed, a member missing); the message names the file (docs/event-log.md#bundles)."""


class WitnessError(PlaitError):
    """A witness file of signed heads cannot be read or written: the message names the file
    and, for a line that is not a witness line, its number (docs/event-log.md#the-witness)."""


class TelemetryError(PlaitError):
    """Spans cannot be built or exported: the OpenTelemetry SDK is missing (the message names
    the extra), or the backend refused them (it names the endpoint) (docs/telemetry.md)."""


class InvalidInputError(PlaitError, ValueError):
    """Text given to plait is not valid Unicode: it holds a lone surrogate (what undecodable
    bytes become), which the log, stored as UTF-8, cannot hold (docs/event-log.md#text).
    Refused before anything is queued or recorded; the message names the byte that was not
    UTF-8, where it was one."""

    def __init__(self, what: str, offset: int, char: str) -> None:
        self.what = what
        """What was refused, and where in it: ``prompt``, ``input_items[0].text``..."""
        self.offset = offset
        """The offset of the first bad character in that text."""
        byte = undecoded_byte(char)
        if byte is not None:
            why = f"is byte 0x{byte:02x}, which is not UTF-8 (read with another encoding?)"
        else:
            why = f"is U+{ord(char):04X}, half of a UTF-16 pair, which UTF-8 cannot encode"
        super().__init__(
            f"{what} is not valid text: character {offset} {why}; nothing was recorded"
        )


def undecoded_byte(char: str) -> int | None:
    """The byte that ``char`` stands for, if it is one that was not UTF-8 as Python's
    ``surrogateescape`` reads it (U+DC80 to U+DCFF), else ``None``."""
    code = ord(char)
    return code - 0xDC00 if 0xDC80 <= code <= 0xDCFF else None


class ContentUnavailableError(PlaitError):
    """What was asked needs content the log does not have: its storage policy never stored it,
    it expired, or it was redacted."""

    def __init__(self, session_id: str, what: str, reason: str) -> None:
        super().__init__(f"session {session_id}: cannot {what}: {reason}")
        self.session_id = session_id
        self.reason = reason


class ErasureError(PlaitError):
    """``forget`` cannot erase a session's content now, or at all; nothing was erased."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"session {session_id}: cannot erase: {reason}")
        self.session_id = session_id
        self.reason = reason


class NotFoundError(PlaitError, LookupError):
    """What a call names does not exist: a session in the store, a conversation in a session."""


class UnknownSessionError(NotFoundError):
    """The store holds no session by this id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id} in the store")
        self.session_id = session_id


class PrunedSessionError(UnknownSessionError):
    """The session was in the store, and a prune removed it (docs/storage.md#retention)."""

    def __init__(self, session_id: str, line: str) -> None:
        NotFoundError.__init__(self, line)
        self.session_id = session_id


class UnknownConversationError(NotFoundError):
    """The session has no live conversation by this id (never opened, or destroyed)."""

    def __init__(self, session_id: str, conversation_id: str) -> None:
        super().__init__(f"session {session_id}: no conversation {conversation_id}")
        self.session_id = session_id
        self.conversation_id = conversation_id


class SessionClosedError(PlaitError):
    """The call needs an open session, and this handle's session is closed."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} is closed")
        self.session_id = session_id


class IllegalTransitionError(PlaitError, RuntimeError):
    """A session, or a conversation's turn, was asked to move from a state that transition
    does not leave (a bug in plait, never a user's mistake: docs/processes.md#a-sessions-life,
    docs/conversations.md#a-turns-states)."""

    def __init__(self, subject: str, transition: str, kind: str, state: str) -> None:
        """``subject`` names what was asked (``session s1``); ``kind``, what it is."""
        super().__init__(f"{subject}: cannot {transition} a {kind} that is {state}")
        self.subject = subject
        self.transition = transition
        self.state = state


class SessionFailedError(PlaitError):
    """Something broke inside a running session (an actor's handling raised, or the store failed
    a write): its actors are stopped in this process and every caller waiting on it gets this
    error; the log is the truth to resume it from (see ``docs/failures.md``)."""

    def __init__(self, session_id: str, actor: str, handling: str, cause: BaseException) -> None:
        self.session_id = session_id
        self.actor = actor
        """What broke: ``conversation <id>``, ``the scheduler``, ``the session``, ``the MCP
        pool``, ``the recovery of task <id>``, or ``the store`` (a write of the journal
        failed)."""
        self.handling = handling
        """What it was doing: the message it handled, or the events it wrote."""
        self.cause = cause
        """The exception that broke it."""
        what = " ".join(f"{type(cause).__name__}: {cause}".split())
        super().__init__(
            f"session {session_id} failed: {actor}, handling {handling}, raised {what}; "
            "its actors are stopped (resume it to go on from its log)"
        )
        self.__cause__ = cause


class McpError(PlaitError):
    """An MCP server failed to start, answer or stay up."""


class ToolError(PlaitError):
    """A tool call failed in a way the model should be told about."""


class ReplayError(PlaitError):
    """A replay could not run."""


class DivergenceError(ReplayError):
    """A replayed program produced an event different from the recorded one."""


ModelErrorKind = Literal[
    "auth", "bad_request", "timeout", "rate_limited", "unavailable", "malformed", "disconnected"
]
"""Why a model request failed, so a caller can act without parsing the message."""


class ModelError(PlaitError):
    """A model request failed for good: retries are spent, or retrying cannot help."""

    def __init__(
        self, message: str, *, kind: ModelErrorKind, status: int | None = None, attempts: int = 1
    ) -> None:
        self.kind: ModelErrorKind = kind
        """``auth``, ``bad_request``, ``timeout``, ``rate_limited``, ``unavailable``,
        ``malformed`` or ``disconnected``."""
        self.status = status
        """The HTTP status of the last attempt, when the server answered with one."""
        self.attempts = attempts
        """How many requests were sent (0 when none could be: e.g. no API key)."""
        super().__init__(message)


class EffectLoopClosedError(PlaitError, RuntimeError):
    """Work was submitted to an effect loop that has been closed."""
