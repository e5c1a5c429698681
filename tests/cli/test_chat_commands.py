"""``plait chat``'s commands, custom commands, ``@file`` references, system prompt and line
input, typed into a real ``plait chat`` on a pseudo-terminal, against a scripted model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import CTRL_D, Terminal, clean_env

from plait.events import SqliteStore, TaskEnqueued, as_text
from plait.testing import ScriptedModelServer, Step

REVIEW = """---
description: review a file with care
---
Review $ARGUMENTS carefully, then say what to fix first."""


def project(tmp_path: Path, base_url: str) -> None:
    """A project: its config, rules, a custom command, a text file and a binary one."""
    (tmp_path / "plait.toml").write_text(
        f'[model]\nbase_url = "{base_url}"\nmodel = "scripted"\n\n'
        "[history]\nkeep_recent_tokens = 1\n"
    )
    (tmp_path / "AGENTS.md").write_text("Answer in French.\n")
    (tmp_path / ".plait" / "commands").mkdir(parents=True)
    (tmp_path / ".plait" / "commands" / "review.md").write_text(REVIEW)
    (tmp_path / "notes.txt").write_text("alpha beta gamma\n")
    (tmp_path / "logo.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")


def user_text(request: object) -> str:
    """The text of a request's last user message (its parts joined)."""
    message = [m for m in request.messages if m["role"] == "user"][-1]  # type: ignore[attr-defined]
    content = message["content"]
    return content if isinstance(content, str) else "\n".join(p["text"] for p in content)


def test_chat_commands_custom_commands_files_and_the_system_prompt(tmp_path: Path) -> None:
    script = [
        Step(text="bonjour"),
        Step(text="reviewed"),
        Step(text="read it"),
        Step(text="two lines"),
        Step(text="They said hello, reviewed a file and read notes."),  # the compaction
    ]
    env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb", "XDG_CONFIG_HOME": "/none"}
    with ScriptedModelServer(script) as server:
        project(tmp_path, server.base_url)
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        shown = term.say("/help")
        for command in ("/new", "/resume", "/history", "/compact", "/model", "/quit"):
            assert command in shown
        assert "/review" in shown and "review a file with care" in shown
        assert "unknown command /nope; the commands are: /help /new" in term.say("/nope")
        assert "bonjour" in term.say("hello")
        assert "reviewed" in term.say("/review parser.py")
        shown = term.say("summarise @notes.txt please")
        assert "[attached notes.txt]" in shown and "read it" in shown
        assert "@logo.bin: a binary file" in term.say("look at @logo.bin")
        term.send(b"first line \\\n")
        term.expect("...> ")
        assert "two lines" in term.say("second line")
        assert "compacted: messages before #" in term.say("/compact")
        assert "two lines" in term.say("/history --limit 1")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    first, review, attach, lines, compaction = server.requests
    instructions = json.dumps(first.messages)
    assert f"The working directory is {tmp_path.resolve()}." in instructions
    assert "Answer in French." in instructions
    assert user_text(review) == "Review parser.py carefully, then say what to fix first."
    assert "alpha beta gamma" in user_text(attach)
    assert user_text(lines) == "first line \nsecond line"
    assert compaction.messages[0]["content"].startswith("You are compacting")
    # What the model was given is in the log: a replay needs neither the command nor the file.
    (tmp_path / "notes.txt").unlink()
    (tmp_path / ".plait" / "commands" / "review.md").unlink()
    with SqliteStore(tmp_path / ".plait" / "plait.db") as store:
        [info] = store.streams()
        inputs = [
            "\n".join(as_text(getattr(item, "text", "")) or "" for item in e.body.plan.input_items)
            for e in store.read(info.stream)
            if isinstance(e.body, TaskEnqueued)
        ]
    assert any("alpha beta gamma" in text for text in inputs)
    replayed = subprocess.run(
        [sys.executable, "-m", "plait", "replay", info.stream, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replayed.returncode == 0, replayed.stderr
    result = json.loads(replayed.stdout)
    assert result["events"] == result["total"] and result["divergence"] is None


def test_chat_reads_commands_that_are_subcommands_and_switches_model_and_session(
    tmp_path: Path,
) -> None:
    env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb", "XDG_CONFIG_HOME": "/none"}
    with ScriptedModelServer([Step(text="one"), Step(text="two"), Step(text="three")]) as server:
        project(tmp_path, server.base_url)
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        term.say("hi")
        listed = term.say("/sessions")
        assert "model: scripted" in term.say("/model")
        assert "model: bigger from the next task" in term.say("/model bigger")
        assert "two" in term.say("and now?")
        assert "approval policy: never" in term.say("/approval")
        assert "'sometimes' is not a policy" in term.say("/approval sometimes")
        second_id = term.say("/new").split("session ")[-1].split()[0]
        assert "three" in term.say("hello again")
        assert "/resume: no session in the store matches 'nothing-like-it'" in term.say(
            "/resume nothing-like-it"
        )
        term.send(b"/quit\n")
        assert term.exit_code() == 0
    assert [r.body["model"] for r in server.requests] == ["scripted", "bigger", "bigger"]
    sessions = subprocess.run(
        [sys.executable, "-m", "plait", "sessions"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = sessions.stdout.splitlines()  # the session active last first
    assert len(rows) == 2 and second_id.startswith(rows[0].split()[0])
    first = rows[1].split()[0]
    # /sessions printed what plait sessions prints, its own session owned by the chat
    assert f"{first}  " in listed and "owned by this process  hi" in listed


def test_chat_is_coloured_on_a_terminal_and_plain_in_a_pipe(tmp_path: Path) -> None:
    env = {**clean_env(), "OPENAI_API_KEY": "test", "XDG_CONFIG_HOME": "/none"}
    for name in ("NO_COLOR", "FORCE_COLOR"):
        env.pop(name, None)
    with ScriptedModelServer([Step(text="on a terminal"), Step(text="in a pipe")]) as server:
        project(tmp_path, server.base_url)
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, {**env, "TERM": "xterm"})
        term.expect("you> ")
        term.say("/nope")
        term.send(b"hi\n")
        term.expect("on a terminal")
        term.expect("you> ")
        term.send(CTRL_D)
        assert term.exit_code() == 0
        assert "\x1b[1myou> \x1b[0m" in term.seen  # the prompt, in bold
        assert "\x1b[33m[unknown command /nope" in term.seen  # a problem, in yellow
        piped = subprocess.run(
            [sys.executable, "-m", "plait", "chat"],
            input="/nope\nhi again\n",
            cwd=tmp_path,
            env={**env, "TERM": "xterm"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert piped.returncode == 0, piped.stderr
    assert "in a pipe" in piped.stdout and "unknown command /nope" in piped.stderr
    assert "\x1b" not in piped.stdout + piped.stderr


@pytest.mark.parametrize(
    ("encoding", "where"),
    [
        ({}, "byte 0xe9 at character 4"),  # read with surrogateescape, as Python reads a C locale
        ({"PYTHONIOENCODING": "utf-8:strict"}, "byte 0xe9 at offset 4"),
    ],
)
def test_chat_refuses_a_line_that_is_not_utf8_and_goes_on(
    tmp_path: Path, encoding: dict[str, str], where: str
) -> None:
    env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb", "XDG_CONFIG_HOME": "/none"}
    env.update({"LC_ALL": "C", **encoding})
    with ScriptedModelServer([Step(text="fine")]) as server:
        project(tmp_path, server.base_url)
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        term.send(b"caf \xe9\n")  # Latin-1, typed where UTF-8 is read
        refused = term.expect("you> ")
        assert (
            f"[your input is not valid UTF-8 ({where}); check the terminal's encoding; "
            "nothing was sent]"
        ) in refused, refused
        assert "surrogate" not in refused
        assert "fine" in term.say("and now?")
        term.send(CTRL_D)
        assert term.exit_code() == 0
    assert len(server.requests) == 1


def test_chat_refuses_to_attach_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    env = {**clean_env(), "OPENAI_API_KEY": "test", "TERM": "dumb", "XDG_CONFIG_HOME": "/none"}
    with ScriptedModelServer([Step(text="read it")]) as server:
        project(tmp_path, server.base_url)
        (tmp_path / "latin.txt").write_bytes("Notes prises au café.\n".encode("latin-1"))
        term = Terminal([sys.executable, "-m", "plait", "chat"], tmp_path, env)
        term.expect("you> ")
        refused = term.say("summarise @latin.txt please")
        assert (
            "[@latin.txt is not UTF-8 text (byte 0xe9 at offset 19): convert it, e.g. "
            "iconv -f latin1 -t utf-8 (nothing was sent)]"
        ) in refused, refused
        assert "read it" in term.say("summarise @notes.txt please")  # UTF-8: attached
        term.send(CTRL_D)
        assert term.exit_code() == 0
    (attach,) = server.requests
    assert "alpha beta gamma" in user_text(attach) and "\ufffd" not in user_text(attach)
