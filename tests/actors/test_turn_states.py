"""A turn's phases and its calls' states: one table each, legal moves only, the docs drawn from
them (docs/conversations.md#a-turns-states)."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from plait._errors import IllegalTransitionError, PlaitError
from plait._machines import moved
from plait.actors._turn_states import (
    CALL_TRANSITIONS,
    TRANSITIONS,
    CallState,
    Phase,
    call_diagram,
    diagram,
)

CONVERSATIONS_MD = Path(__file__).resolve().parents[2] / "docs" / "conversations.md"


@pytest.mark.parametrize(("marker", "drawn"), [("turn", diagram), ("call", call_diagram)])
def test_the_diagrams_in_the_docs_are_the_tables(marker: str, drawn: Callable[[], str]) -> None:
    text = CONVERSATIONS_MD.read_text()
    found = re.search(rf"<!-- {marker}: .*?-->\n```mermaid\n(.*?)\n```", text, re.DOTALL)
    assert found is not None, f"docs/conversations.md lost its {marker} diagram"
    assert found.group(1) == drawn(), "regenerate it: python -m plait.actors._turn_states"


def test_a_turn_with_calls_loops_then_completes() -> None:
    phase = Phase.PROMPTING
    path = ["request", "reply_with_calls", "calls_answered", "request", "complete"]
    seen = []
    for transition in path:
        phase = moved(TRANSITIONS, transition, phase, "turn", lambda: "conversation c, task t")
        seen.append(phase)
    assert seen == [
        Phase.AWAITING_MODEL,
        Phase.RUNNING_TOOLS,
        Phase.PROMPTING,
        Phase.AWAITING_MODEL,
        Phase.ENDED,
    ]


def test_nothing_leaves_an_ended_turn() -> None:
    for transition in TRANSITIONS:
        with pytest.raises(IllegalTransitionError) as raised:
            moved(TRANSITIONS, transition, Phase.ENDED, "turn", lambda: "conversation c, task t")
        assert str(raised.value) == (
            f"conversation c, task t: cannot {transition} a turn that is ended"
        )


def test_a_call_answered_twice_is_a_plait_error_naming_it() -> None:
    with pytest.raises(PlaitError, match="call k: cannot answer a call that is recorded"):
        moved(
            CALL_TRANSITIONS, "answer", CallState.RECORDED, "call", lambda: "conversation c, call k"
        )


@pytest.mark.parametrize(
    ("table", "first", "last"),
    [
        (TRANSITIONS, Phase.PROMPTING, Phase.ENDED),
        (CALL_TRANSITIONS, CallState.WAITING, CallState.RECORDED),
    ],
)
def test_every_state_is_reached_and_left_and_every_move_goes_somewhere_new(
    table: Mapping[str, Mapping[enum.Enum, enum.Enum]], first: enum.Enum, last: enum.Enum
) -> None:
    states = set(type(first))
    reached = {first} | {target for moves in table.values() for target in moves.values()}
    left = {last} | {source for moves in table.values() for source in moves}
    assert reached == states
    assert left == states
    assert all(source is not target for m in table.values() for source, target in m.items())
