"""The fork example of docs/cli.md, as a user runs it on the demo's session."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from chat_rules import assert_chat_valid

from plait.runtime._handoffs import FORK_CUT
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


@pytest.mark.usefixtures("demo_here")
def test_the_demo_forked_between_its_hand_off_and_the_answer_goes_on(
    cli: Cli, server: ScriptedModelServer
) -> None:
    session = json.loads(cli("sessions", "--json").stdout)["session_id"]
    log = [json.loads(line) for line in cli("log", session, "--json").stdout.splitlines()]
    cut = log[11]["body"]  # seq 12, where docs/cli.md forks it: the root handed its task on
    assert (cut["type"], cut["reason"]) == ("TurnAborted", "replaced")

    forked = cli("fork", session, "--at", "12")
    assert forked.returncode == 0, forked.stderr
    new = forked.stdout.strip()
    cli.configure(server.base_url)
    server.push(Step(text="Going on without the helper."))
    went = cli("exec", "--session", new, "go on")
    assert went.returncode == 0, went.stderr
    assert "Going on without the helper." in went.stdout

    [request] = server.requests
    assert_chat_valid(request)  # OpenAI takes it: the conv_create call is answered
    answer = request.messages[-2]
    assert answer["role"] == "tool" and json.loads(answer["content"])["error"] == FORK_CUT
    assert request.messages[-1] == {"role": "user", "content": "go on"}
    rows = [json.loads(line) for line in cli("audit", new, "--json").stdout.splitlines()]
    assert [(row["tool"], row["outcome"]) for row in rows] == [("conv_create", "error")]
    cli.verified_and_replayed(new)


def test_a_fork_below_seq_2_is_out_of_range(cli: Cli) -> None:
    session = cli.record("src")
    result = cli("fork", session, "--at", "0")
    assert (result.returncode, result.stderr) == (
        1,
        "plait: session src-1: cannot fork at seq 0: choose 2 to 34 "
        "(the root conversation is opened at seq 2)\n",
    )
