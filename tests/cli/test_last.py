"""``plait exec --last`` and ``plait chat --last`` go on with the session active last."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from terminal import CTRL_D, Terminal

from plait.events import SqliteStore
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


def test_exec_last_resumes_the_session_active_last(cli: Cli, server: ScriptedModelServer) -> None:
    first, second = cli.record("a"), cli.record("b")
    cli.configure(server.base_url)
    env = {"OPENAI_API_KEY": "test"}
    server.push(Step(text="Back in b."))
    result = cli("exec", "--last", "Where are we?", env=env)
    assert result.returncode == 0, result.stderr
    assert f"session {second} resumed" in result.stderr and result.stdout == "Back in b.\n"
    # Now the first is written to last: --last follows it.
    server.push(Step(text="In a."), Step(text="Still a."))
    assert cli("exec", "--session", first, "And here?", env=env).returncode == 0
    result = cli("exec", "--last", "Still here?", env=env)
    assert f"session {first} resumed" in result.stderr and result.stdout == "Still a.\n"
    assert server.requests[-1].messages[-3:-1] == [
        {"role": "user", "content": "And here?"},
        {"role": "assistant", "content": "In a."},
    ]


def test_last_needs_a_session_and_is_not_given_with_session(cli: Cli) -> None:
    cli.configure("http://127.0.0.1:9/v1")
    env = {"OPENAI_API_KEY": "test"}
    result = cli("exec", "--last", "Hello?", env=env)
    assert result.returncode == 1 and "no store here" in result.stderr
    session = cli.record("c")
    result = cli("exec", "--last", "--session", session, "Hello?", env=env)
    assert result.returncode == 1
    assert result.stderr == "plait: --last and --session each name a session: give one of them\n"


def test_chat_last_goes_on_with_the_last_session(cli: Cli, server: ScriptedModelServer) -> None:
    cli.record("x")
    session = cli.record("y")
    cli.configure(server.base_url)
    server.push(Step(text="Still y."))
    env = {**cli.env, "OPENAI_API_KEY": "test", "TERM": "dumb"}
    term = Terminal([sys.executable, "-m", "plait", "chat", "--last"], cli.cwd, env)
    term.expect(session)
    term.expect("you> ")
    term.send(b"Still there?\n")
    assert "Still y." in term.expect("you> ")
    term.send(CTRL_D)
    assert term.exit_code() == 0
    with SqliteStore(cli.store) as store:
        last = store.read(session)
    assert any("Still y." in str(e.body) for e in last)


def test_resume_opens_chat_on_the_session_named(cli: Cli, server: ScriptedModelServer) -> None:
    first = cli.record("r")
    cli.record("s")
    cli.configure(server.base_url)
    server.push(Step(text="Back in r."))
    env = {"OPENAI_API_KEY": "test"}
    result = cli("resume", first[:3], env=env, stdin="Where were we?\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"session {first}: /help lists the commands")
    assert "Back in r." in result.stdout
    # the task ran in that session, on its history
    assert server.requests[0].messages[-3:] == [
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "Still two."},
        {"role": "user", "content": "Where were we?"},
    ]
    with SqliteStore(cli.store) as store:
        assert len(list(store.streams())) == 2  # no new session
        assert any("Back in r." in str(e.body) for e in store.read(first))


def test_resume_last_goes_on_with_the_last_session(cli: Cli, server: ScriptedModelServer) -> None:
    cli.record("u")
    session = cli.record("v")
    cli.configure(server.base_url)
    server.push(Step(text="Still v."))
    result = cli("resume", "--last", env={"OPENAI_API_KEY": "test"}, stdin="Still there?\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"session {session}:") and "Still v." in result.stdout


def test_resume_needs_one_session(cli: Cli) -> None:
    session = cli.record("w")
    cli.configure("http://127.0.0.1:9/v1")
    line = "plait: plait resume takes a SESSION (see `plait sessions`) or --last: one of them\n"
    for args in ((), ("--last", session)):
        result = cli("resume", *args, env={"OPENAI_API_KEY": "test"})
        assert (result.returncode, result.stderr) == (1, line)
