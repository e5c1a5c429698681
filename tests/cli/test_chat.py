"""``plait chat`` driven through a pseudo-terminal, as a person types into it.

The child is a real ``plait chat`` process whose controlling terminal is the pty, so a Ctrl-C
typed there is a real SIGINT from the terminal; the model is a ``ScriptedModelServer``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from terminal import CTRL_C, CTRL_D, Terminal, clean_env

from plait.events import SessionClosed, SqliteStore, ToolApprovalDecided, TurnAborted
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step


def test_chat_streams_shows_who_runs_and_ctrl_c_interrupts_the_task_not_the_program(
    tmp_path: Path,
) -> None:
    create = ScriptedToolCall("conv_create", '{"user_instruction": "count the files"}')
    script = [
        Step(text="hello there"),
        Step(text="handing it over", tool_calls=[create]),
        Step(text="three files"),
        Step(text="the helper says three"),
        Step(text="word " * 400, chunk_chars=5, chunk_delay=0.02),
        Step(text="still here"),
    ]
    with ScriptedModelServer(script) as server:
        (tmp_path / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted"\n'
        )
        env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb"}
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        term.send(b"hi\n")
        assert "hello there" in term.expect("you> ")
        term.send(b"delegate\n")
        shown = term.expect("you> ")
        assert shown.index("[root's task is replaced by conv_create]") < shown.index(
            "[helper-1 running]"
        )
        resumed = shown.index("[root running]", shown.index("three files"))  # it resumes
        assert resumed < shown.index("the helper says three")
        term.send(b"go on and on\n")
        term.expect("word word")  # streaming
        term.send(CTRL_C)
        term.expect("[interrupting the task")
        term.expect("you> ")  # the program goes on
        term.send(b"are you there?\n")
        assert "still here" in term.expect("you> ")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    with SqliteStore(tmp_path / ".plait" / "plait.db") as store:
        [info] = store.streams()
        events = store.read(info.stream)
    aborted = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert [(a.reason, a.cause) for a in aborted] == [
        ("replaced", "replaced"),
        ("interrupted", "user"),
    ]
    assert events[-1].body == SessionClosed("closed by the user (the chat ended)")  # Ctrl-D


def test_a_second_ctrl_c_leaves_while_the_task_ends(tmp_path: Path) -> None:
    script = [Step(text="word " * 400, chunk_chars=5, chunk_delay=0.02)]
    with ScriptedModelServer(script) as server:
        (tmp_path / "plait.toml").write_text(f'[model]\nbase_url = "{server.base_url}"\n')
        env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb"}
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        term.send(b"talk\n")
        term.expect("word word")
        term.send(CTRL_C)
        term.expect("[interrupting the task")
        term.send(CTRL_C)  # while the task ends (130), or at the prompt once it has (0)
        assert term.exit_code() in (0, 130)


def test_chat_asks_before_a_call_its_policy_asks_for(tmp_path: Path) -> None:
    note = ScriptedToolCall("t__note", '{"key": "k", "text": "v"}')
    fail = ScriptedToolCall("t__fail", '{"message": "x"}')
    script = [
        Step(tool_calls=[note]),  # asks; remembered for the session
        Step(tool_calls=[note, fail]),  # the note by its key; the other asks
        Step(text="one noted, one refused"),
        Step(tool_calls=[fail]),  # asks; Ctrl-C interrupts the task instead
        Step(text="still here"),
    ]
    server_py = Path(__file__).parents[1] / "mcp" / "server.py"
    with ScriptedModelServer(script) as server:
        (tmp_path / "plait.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nmodel = "scripted"\n'
            '[policy]\napproval = "on-write"\n'
            f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{server_py}"]\n'
        )
        env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb"}
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        term.send(b"note it\n")
        shown = term.expect('approve t__note {"key": "k", "text": "v"}? ')
        assert "[policy 'on-write': t__note is not read-only]" in shown
        term.expect("[y]es once / [s]ession / [c]onversation / [n]o: ")
        term.send(b"s\n")
        shown = term.expect("approve t__fail")  # the second note did not ask
        assert "approve t__note" not in shown and "<- ok: noted k" in shown
        term.expect("[n]o: ")
        term.send(b"n\n")
        shown = term.expect("you> ")
        assert "<- refused: not run: denied by user: denied at the terminal" in shown
        assert "one noted, one refused" in shown
        term.send(b"fail again\n")
        term.expect("approve t__fail")
        term.expect("[n]o: ")
        term.send(CTRL_C)
        term.expect("[interrupting the task")
        term.expect("you> ")
        term.send(b"are you there?\n")
        assert "still here" in term.expect("you> ")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    with SqliteStore(tmp_path / ".plait" / "plait.db") as store:
        [info] = store.streams()
        events = store.read(info.stream)
    decided = [e.body for e in events if isinstance(e.body, ToolApprovalDecided)]
    assert [(d.approved, d.decided_by, d.scope) for d in decided] == [
        (True, "user", "session"),
        (True, "key", "session"),
        (False, "user", "once"),
    ]
    aborted = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert [a.reason for a in aborted] == ["interrupted"]


@pytest.mark.parametrize("whose", ["mine", "another user's"])
def test_typed_lines_are_kept_in_the_projects_plait_directory_unless_another_user_owns_it(
    tmp_path: Path, whose: str
) -> None:
    project = tmp_path / "project"
    (project / ".plait").mkdir(parents=True)
    if whose != "mine":  # a shared directory where someone else made .plait/ first
        os.chown(project / ".plait", 65534, 65534)
    with ScriptedModelServer([Step(text="noted")]) as server:
        (project / "plait.toml").write_text(f'[model]\nbase_url = "{server.base_url}"\n')
        store = tmp_path / "own.db"  # the store is named: only the history is at stake
        env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb"}
        argv = [sys.executable, "-m", "plait", "--store", str(store), "chat"]
        term = Terminal(argv, project, env)
        term.expect("you> ")
        term.send(b"remember me\n")
        assert "noted" in term.expect("you> ")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    kept = project / ".plait" / "chat_history"
    if whose == "mine":
        assert "remember me" in kept.read_text()
    else:
        assert not kept.exists()
        assert f"not using {project / '.plait'}" in term.seen
