"""``plait tree``: who created whom, and each task's timeline."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from scripted import call, record_session

from plait.cli._style import Style
from plait.cli._tree import tree_lines
from plait.events import MemoryStore
from plait.testing import Step

if TYPE_CHECKING:
    from conftest import Cli

CHAIN = [
    Step(text="Asking A.", tool_calls=[call("conv_create", user_instruction="Do A.")]),
    Step(tool_calls=[call("conv_create", user_instruction="Do B.")]),
    Step(text="B done."),
    Step(text="A done."),
    Step(text="Root done."),
]
"""The root creates A, which creates B; B answers, then A's and the root's continuations."""

_CLOCK = re.compile(r"\d\d:\d\d:\d\d\.\d{3}  \d+\.\d{3} s")


def test_a_conv_create_chain_is_drawn_as_a_tree_under_the_tasks_that_made_it() -> None:
    store = MemoryStore()
    session = record_session(store, CHAIN, ["Start the chain."], "t")
    lines = [_CLOCK.sub("TIME", line) for line in tree_lines(store.read(session))]
    assert lines[0].startswith("session t-1  gpt-4o-mini  started ")
    assert lines[0].endswith("  closed")
    assert lines[1:] == [
        "root t-2",
        "├── task t-3  TIME  replaced: conv_create -> t-4  'Start the chain.'",
        "│   ├── -> conv_create  ok  0.0 ms",
        "│   └── conversation t-4  created by t-2",
        "│       ├── task t-5  TIME  replaced: conv_create -> t-7  'Do A.'",
        "│       │   ├── -> conv_create  ok  0.0 ms",
        "│       │   └── conversation t-7  created by t-4",
        "│       │       └── task t-8  TIME  completed  'Do B.'",
        "│       └── task t-9  TIME  completed  continues after conv_create",
        "└── task t-6  TIME  completed  continues after conv_create",
    ]


def test_the_tree_in_colour_paints_outcomes_and_says_the_same() -> None:
    store = MemoryStore()
    session = record_session(store, CHAIN, ["Start the chain."], "c")
    events = store.read(session)
    coloured = tree_lines(events, Style(enabled=True))
    assert "\x1b[32mcompleted\x1b[0m" in "\n".join(coloured)
    assert "\x1b[33mreplaced\x1b[0m" in "\n".join(coloured)
    plain = [re.sub(r"\x1b\[[\d;]*m", "", line) for line in coloured]
    assert plain == tree_lines(events)


@pytest.mark.usefixtures("demo_here")
def test_plait_tree_draws_the_demo_session(cli: Cli) -> None:
    session = cli("sessions", "--json").stdout.split('"session_id":"')[1][:8]
    result = cli("tree", session)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("root ")
    helper = next(line for line in lines if "── conversation " in line)
    assert helper.startswith("│   └── conversation ") and "created by" in helper
    calls = [line for line in lines if "release__pending_changes" in line]
    assert len(calls) == 1 and "-> release__pending_changes  ok  " in calls[0]
    assert "\x1b[" not in result.stdout  # a pipe gets no colour
