"""``plait replay --live``: the demo session rerun against a scripted model, as a user runs it
(docs/replay.md#live-reruns)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import msgspec
import pytest

from plait.cli._demo import demo_script
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

RELEASE = f"""
[mcp_servers.release]
command = {json.dumps(sys.executable)}
args = ["-m", "plait.cli._demo_tools"]
"""
"""The demo's MCP server, configured as a user would to rerun the demo's session."""


@pytest.fixture
def demo_session(demo_here: None, cli: Cli, server: ScriptedModelServer) -> str:
    """The demo's session, in ``cli``'s store, configured to be rerun against ``server``."""
    cli.configure(server.base_url, top=RELEASE.strip() + "\n\n")
    listed = cli("sessions", "--json")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    return str(row["session_id"])


def changed_script() -> list[Step]:
    steps = demo_script()
    steps[-1] = msgspec.structs.replace(steps[-1], text="The helper found 3 changes; ship two.")
    return steps


def test_the_demo_rerun_against_the_same_model_is_the_same(
    cli: Cli, server: ScriptedModelServer, demo_session: str
) -> None:
    session = demo_session
    server.push(*demo_script())
    done = cli("replay", session, "--live")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"session {session[:8]} rerun as ")
    assert lines[1].startswith(
        "task 1 'Plan a tiny release: ask a helper conve…': same answer, same tool calls; "
        "1 call from the log, 0 not recorded;"
    )
    assert lines[-1] == "result: 1 tasks, no difference"
    rerun_id = lines[0].split(" rerun as ")[1][:8]
    checked = cli("verify", rerun_id)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    replayed = cli("replay", rerun_id)
    assert replayed.returncode == 0 and "no difference" in replayed.stdout, replayed.stdout


def test_the_demo_rerun_against_a_changed_model_exits_1_and_shows_both_answers(
    cli: Cli, server: ScriptedModelServer, demo_session: str
) -> None:
    session = demo_session
    server.push(*changed_script())
    done = cli("replay", session, "--live", "--no-save")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "answer differs" in done.stdout and "same tool calls" in done.stdout
    assert (
        "  recorded: The helper found 3 pending changes, so the release ships all three.\n"
        "  rerun:    The helper found 3 changes; ship two.\n"
    ) in done.stdout
    assert "(not kept)" in done.stdout and done.stdout.endswith("result: 1 tasks, 1 differ (any)\n")
    server.push(*changed_script())
    tools_only = cli("replay", session, "--live", "--no-save", "--fail-on", "tools", "--json")
    assert tools_only.returncode == 0, tools_only.stderr
    [report] = [json.loads(line) for line in tools_only.stdout.splitlines()]
    assert report["session_id"] == session and report["differs"] is False
    [task] = report["tasks"]
    assert task["recorded_answer"] != task["rerun_answer"]
    assert (task["from_log"], task["not_recorded"], task["added"]) == (1, 0, [])


def test_replay_live_needs_sessions_and_says_which_failed(
    cli: Cli, server: ScriptedModelServer, demo_session: str
) -> None:
    session = demo_session
    nothing = cli("replay", "--live")
    assert nothing.returncode == 1
    assert nothing.stderr == "plait: plait replay --live: name a session, or give --all\n"
    two = cli("replay", session, session)
    assert two.returncode == 1 and "name one session" in two.stderr
    server.push(Step(status=500, error_message="down"))
    failed = cli("replay", session, "--live", "--no-save", "-c", "model.max_attempts=1")
    assert failed.returncode == 1, failed.stdout + failed.stderr  # the task failed: it differs
    assert "the rerun's task ended model_error" in failed.stdout


def test_a_command_line_session_is_rerun_with_the_instructions_of_now(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url)
    (cli.cwd / "AGENTS.md").write_text("Answer in one word.\n")
    server.push(Step(text="Fine."))
    assert cli("exec", "How are you?").returncode == 0
    (cli.cwd / "AGENTS.md").write_text("Answer in French.\n")
    server.push(Step(text="Bien."))
    listed = cli("sessions", "--json")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    done = cli("replay", row["session_id"], "--live", "--no-save")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  rerun:    Bien.\n" in done.stdout
    sent = json.dumps(server.requests[-1].body["messages"])
    assert "Answer in French." in sent and "Answer in one word." not in sent
