"""The plan as people see it (docs/tools.md#plan): ``plait exec --plan-tool`` and
``plait chat --plan-tool`` print it each time the model sets it, ``plait show`` prints the
current one, and ``plait replay`` makes it again from the log."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from scripted import call
from terminal import CTRL_D, Terminal, clean_env

from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

PLAN = [
    {"step": "read the issue", "status": "completed"},
    {"step": "write the fix", "status": "in_progress"},
    {"step": "run the tests", "status": "pending"},
]
DONE = [{**step, "status": "completed"} for step in PLAN]
SCRIPT = [
    Step(tool_calls=[call("update_plan", explanation="three steps", plan=PLAN)]),
    Step(tool_calls=[call("update_plan", plan=[{"step": "x", "status": "started"}])]),
    Step(tool_calls=[call("update_plan", plan=DONE)]),
    Step(text="All done."),
]
"""Two plans with a bad call between them, then the answer."""

FIRST_BLOCK = "[plan] three steps\n  [x] read the issue\n  [>] write the fix\n  [ ] run the tests\n"
LAST_BLOCK = "[plan]\n  [x] read the issue\n  [x] write the fix\n  [x] run the tests\n"


def session_of(stderr: str) -> str:
    first = stderr.splitlines()[0].split()
    assert first[0] == "session", stderr
    return first[1]


def test_exec_prints_each_plan_show_prints_the_last_and_replay_is_clean(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    server.push(*SCRIPT)
    run = cli("exec", "--plan-tool", "Fix the bug.")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "All done.\n"
    assert FIRST_BLOCK in run.stderr and LAST_BLOCK in run.stderr
    # The bad call is answered with an error naming the field, and no plan is printed for it.
    assert "<- error: invalid arguments for update_plan" in run.stderr
    assert "$.plan[0].status" in run.stderr
    assert run.stderr.count("[plan") == 2
    session = session_of(run.stderr)

    show = cli("show", session)
    assert show.returncode == 0, show.stderr
    plans = show.stdout.split("\nplans\n")[1].splitlines()
    assert re.fullmatch(r"  [0-9a-f]{8}  set 2 times, last at seq \d+", plans[0]), plans
    assert plans[1:4] == [
        "    [x] read the issue",
        "    [x] write the fix",
        "    [x] run the tests",
    ]

    replay = cli("replay", session)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "no difference" in replay.stdout


def test_exec_without_the_flag_offers_no_plan_tool(cli: Cli, server: ScriptedModelServer) -> None:
    cli.configure(server.base_url)
    server.push(Step(tool_calls=[call("update_plan", plan=PLAN)]), Step(text="ok"))
    run = cli("exec", "Fix the bug.")
    assert run.returncode == 0, run.stderr
    assert "<- refused: unknown tool 'update_plan': it is not offered here" in run.stderr
    assert "[plan" not in run.stderr
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert "update_plan" not in offered
    assert "\nplans\n" not in cli("show", session_of(run.stderr)).stdout


def test_chat_shows_the_plan_as_it_changes(tmp_path: Path) -> None:
    with ScriptedModelServer(SCRIPT) as server:
        (tmp_path / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted"\n'
        )
        env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb"}
        command = [sys.executable, "-m", "plait", "chat", "--plan-tool"]
        term = Terminal(command, tmp_path, env)
        term.expect("you> ")
        term.send(b"fix the bug\n")
        shown = term.expect("you> ").replace("\r\n", "\n")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    assert FIRST_BLOCK in shown and LAST_BLOCK in shown
    assert shown.index(FIRST_BLOCK) < shown.index(LAST_BLOCK) < shown.index("All done.")
