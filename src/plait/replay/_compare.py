"""How a replay compares what the program produced with what the log recorded, and reports it."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from plait.events import Body, Event

__all__ = ["IGNORED_FIELDS", "Divergence", "ReplayResult", "compare"]

IGNORED_FIELDS = frozenset({"duration_ms", "model", "wire_api", "store", "previous_response_id"})
"""Not the program's decisions, so not compared: measurements, and the model name, the wire
and whether the server keeps responses (and so what a request goes on from), which the
runtime is given at each start or resume (a resume may name others)."""


class Divergence(msgspec.Struct, frozen=True):
    """Where a replay first differed from the log."""

    session_id: str
    """The session replayed."""
    seq: int
    """The seq of the recorded event that was not reproduced."""
    conversation_id: str | None
    """Its conversation."""
    expected: str
    """The recorded event, one line."""
    got: str
    """What the program produced instead (``nothing`` if it produced nothing)."""
    fields: dict[str, list[Any]] = {}
    """Each differing field: ``[expected, got]``."""

    def message(self) -> str:
        """Say where and what, for people."""
        where = f"session {self.session_id} seq {self.seq}"
        if self.conversation_id:
            where += f" (conversation {self.conversation_id})"
        detail = "".join(
            f"\n  {k}: expected {v[0]!r}, got {v[1]!r}" for k, v in self.fields.items()
        )
        return f"{where}: expected {self.expected}, got {self.got}{detail}"


class ReplayResult(msgspec.Struct, frozen=True):
    """How a replay went."""

    session_id: str
    """The session replayed."""
    events: int
    """Recorded events reproduced and equal."""
    total: int
    """Recorded events in the session."""
    divergence: Divergence | None = None
    """The first difference, if any."""

    @property
    def ok(self) -> bool:
        """Whether every recorded event was reproduced."""
        return self.divergence is None


def compare(expected: Event, got: Event | None) -> Divergence | None:
    """The difference between a recorded event and the program's, or ``None``."""
    if got is None:
        return Divergence(
            expected.stream, expected.seq, expected.conversation_id, _line(expected), "nothing"
        )
    fields: dict[str, list[Any]] = {}
    for name in ("conversation_id", "task_id"):
        if getattr(expected, name) != getattr(got, name):
            fields[name] = [getattr(expected, name), getattr(got, name)]
    if type(expected.body) is type(got.body):
        fields |= _differences(expected.body, got.body)
    else:
        fields["type"] = [type(expected.body).__name__, type(got.body).__name__]
    if not fields:
        return None
    return Divergence(
        expected.stream, expected.seq, expected.conversation_id, _line(expected), _line(got), fields
    )


def _differences(expected: Body, got: Body) -> dict[str, list[Any]]:
    mine, theirs = msgspec.to_builtins(expected), msgspec.to_builtins(got)
    return {
        name: [mine.get(name), theirs.get(name)]
        for name in itertools.chain(mine, (k for k in theirs if k not in mine))
        if name not in IGNORED_FIELDS and mine.get(name) != theirs.get(name)
    }


def _line(event: Event) -> str:
    text = msgspec.json.encode(event.body).decode()
    return f"{type(event.body).__name__} {text[:200]}"
