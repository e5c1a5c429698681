"""A session's states and transitions: one table, legal moves only, and the docs drawn from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plait._errors import IllegalTransitionError, PlaitError
from plait.runtime._life import TRANSITIONS, Life, State, diagram

PROCESSES_MD = Path(__file__).resolve().parents[2] / "docs" / "processes.md"


def test_the_diagram_in_the_docs_is_the_table() -> None:
    text = PROCESSES_MD.read_text()
    drawn = re.search(r"<!-- life: .*?-->\n```mermaid\n(.*?)\n```", text, re.DOTALL)
    assert drawn is not None, "docs/processes.md lost its state diagram"
    assert drawn.group(1) == diagram(), "regenerate it: python -m plait.runtime._life"


def test_an_owned_session_lives_through_passivation_to_its_close() -> None:
    life = Life("s1", State.PASSIVE)
    for transition, state in [
        ("own", State.STARTING),
        ("activate", State.ACTIVE),
        ("passivate", State.PASSIVE),
        ("own", State.STARTING),
        ("activate", State.ACTIVE),
        ("close", State.CLOSING),
        ("closed", State.CLOSED),
    ]:
        assert life.move(transition) is state
    assert life.state.ended


def test_a_followed_session_is_taken_over_then_drained_and_handed_back() -> None:
    life = Life("s2", State.FOLLOWED)
    moves = ("take_over", "own", "activate", "drain", "hand_back")
    assert [life.move(t) for t in moves] == [
        State.PASSIVE,
        State.STARTING,
        State.ACTIVE,
        State.DRAINING,
        State.CLOSED,
    ]


def test_a_take_over_the_store_failed_follows_again() -> None:
    life = Life("s5", State.FOLLOWED)
    assert [life.move(t) for t in ("take_over", "follow")] == [State.PASSIVE, State.FOLLOWED]


@pytest.mark.parametrize("ended", [State.CLOSED, State.FAILED, State.LOST])
def test_nothing_leaves_an_ended_state(ended: State) -> None:
    for transition in TRANSITIONS:
        life = Life("s3", ended)
        with pytest.raises(IllegalTransitionError) as raised:
            life.move(transition)
        assert (
            str(raised.value) == f"session s3: cannot {transition} a session that is {ended.value}"
        )
        assert life.state is ended  # an illegal move changes nothing


def test_an_illegal_transition_names_both_and_is_a_plait_error() -> None:
    life = Life("s4", State.FOLLOWED)
    assert not life.can("activate")
    with pytest.raises(PlaitError, match="cannot activate a session that is followed"):
        life.move("activate")


def test_every_state_is_reachable_and_every_transition_goes_somewhere_new() -> None:
    targets = {target for moves in TRANSITIONS.values() for target in moves.values()}
    assert targets == set(State)
    assert all(source is not target for m in TRANSITIONS.values() for source, target in m.items())


def test_a_watched_session_is_never_taken_over_and_only_ends() -> None:
    life = Life("s6", State.FOLLOWED)
    assert life.move("watch") is State.WATCHED and life.state.followed
    assert not life.can("take_over") and not life.can("fail")
    assert life.move("close") is State.CLOSED


def test_the_first_reason_a_session_ended_for_is_the_one_kept() -> None:
    life = Life("s7", State.ACTIVE)
    first, second = PlaitError("the store failed"), PlaitError("lost to another owner")
    assert life.end("fail", first) and life.state is State.FAILED
    assert not life.end("lose", second)  # it had ended: nothing moves
    assert life.why is first


def test_a_drop_out_is_waited_for_only_once_it_began() -> None:
    life = Life("s8", State.ACTIVE)
    assert not life.wait_dropped(0.0)
    done = life.dropping()
    done.set()
    assert life.wait_dropped(10.0)


def test_a_place_held_for_a_command_lapses_or_is_let_go() -> None:
    life = Life("s9", State.ACTIVE)
    assert not life.held
    life.hold(60.0)
    assert life.held
    life.hold(0)
    assert not life.held
