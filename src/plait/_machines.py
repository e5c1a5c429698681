"""A state machine as a table of named transitions: its legal moves, and its drawing.

A table maps each transition's name to the states it leaves and where each goes. ``moved``
takes one transition or raises ``IllegalTransitionError``; ``drawn`` draws the table as a
Mermaid state diagram, which the docs show and a test holds equal to the table. A session's
life (``runtime/_life.py``) and a conversation's turn (``actors/_turn_states.py``) are such tables.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import TypeVar

from plait._errors import IllegalTransitionError

__all__ = ["drawn", "moved"]

S = TypeVar("S", bound=enum.Enum)


def moved(
    table: Mapping[str, Mapping[S, S]],
    transition: str,
    state: S,
    kind: str,
    subject: Callable[[], str],
) -> S:
    """Where ``transition`` takes ``state``; an ``IllegalTransitionError`` naming the ``kind``
    of thing and ``subject()`` (made only then) when the transition does not leave it."""
    target = table[transition].get(state)
    if target is None:
        raise IllegalTransitionError(subject(), transition, kind, str(state.value))
    return target


def drawn(table: Mapping[str, Mapping[S, S]], first: S | None = None, last: S | None = None) -> str:
    """``table`` as a Mermaid state diagram, entered at ``first`` and left from ``last``."""
    lines = ["stateDiagram-v2"]
    if first is not None:
        lines.append(f"    [*] --> {first.value}")
    for name, moves in table.items():
        lines += [f"    {source.value} --> {goal.value}: {name}" for source, goal in moves.items()]
    if last is not None:
        lines.append(f"    {last.value} --> [*]")
    return "\n".join(lines)
