"""The ``plait`` command finds its project as git finds ``.git``: from any directory under it,
every command uses the project's ``plait.toml``, ``.mcp.json``, store and ``AGENTS.md``; ``-v``
says which it used, and a mistake in ``[mcp_servers]`` stops only what starts servers."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from scripted import call

from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"
KEY = {"OPENAI_API_KEY": "test"}
NOBODY = 65534
"""Another user: what the tests chown to (they run as root, or as the owner of their files)."""


def session_of(stderr: str) -> str:
    """The session id from exec's status line, ``session ID started|resumed (...)``."""
    line = next(line for line in stderr.splitlines() if line.startswith("session "))
    return line.split()[1]


def project(cli: Cli, base_url: str) -> tuple[Path, Path]:
    """A repository whose root has ``plait.toml``, ``AGENTS.md`` and a ``.mcp.json`` whose
    server is a script given by a path relative to the root; and a directory deep inside it,
    with rules of its own. Return both."""
    root = cli.cwd / "repo"
    (root / ".git").mkdir(parents=True)
    cli.at(root).configure(base_url)
    (root / "AGENTS.md").write_text("Answer in French.\n")
    (root / "tools").mkdir()
    (root / "tools" / "server.py").write_text(
        f"import runpy\nrunpy.run_path({str(TEST_SERVER)!r}, run_name='__main__')\n"
    )
    server = {"command": sys.executable, "args": ["tools/server.py"]}
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"t": server}}))
    deep = root / "src" / "deep"
    deep.mkdir(parents=True)
    (deep / "AGENTS.md").write_text("Keep it short.\n")
    return root, deep


def test_from_a_subdirectory_exec_and_sessions_use_the_projects_files_and_store(
    cli: Cli, server: ScriptedModelServer
) -> None:
    root, deep = project(cli, server.base_url)
    here = cli.at(deep)
    env = KEY  # Cli's own XDG_CONFIG_HOME: no rules of the machine's user
    server.push(Step(tool_calls=[call("t__echo", text="ping")]), Step(text="Bonjour."))
    first = here("exec", "Say hello.", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Bonjour.\n"
    assert "<- ok: ping" in first.stderr  # the project's server, run from the root
    # One store, the project's: none was made where the command ran.
    assert (root / ".plait" / "plait.db").is_file()
    assert not (deep / ".plait").exists()
    # The instructions name where it ran and carry the rules, the root's first.
    sent = json.dumps(server.requests[0].messages)
    assert f"The working directory is {deep.resolve()}." in sent
    assert sent.index("Answer in French.") < sent.index("Keep it short.")
    session = session_of(first.stderr)
    listed = here("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["session_id"] for line in listed.stdout.splitlines()] == [session]

    server.push(Step(text="Encore."))
    again = here("exec", "--last", "Again.", env=env)
    assert again.returncode == 0, again.stderr
    assert f"session {session} resumed" in again.stderr and again.stdout == "Encore.\n"
    # From the root, the same store.
    assert cli.at(root)("log", session).returncode == 0


def test_exec_outside_a_repository_finds_plait_toml_above_and_sends_agents_md(
    cli: Cli, server: ScriptedModelServer
) -> None:
    top = cli.cwd / "notes"
    top.mkdir()
    cli.at(top).configure(server.base_url, '[store]\nurl = "logs/plait.db"\n')
    (top / "AGENTS.md").write_text("Be brief.\n")  # outside a repository: only the cwd's
    below = top / "a" / "b"
    below.mkdir(parents=True)
    (below / "AGENTS.md").write_text("Use lists.\n")
    server.push(Step(text="Done."))
    result = cli.at(below)("exec", "Go.", env=KEY)
    assert result.returncode == 0, result.stderr
    assert (top / "logs" / "plait.db").is_file()  # store.url read from plait.toml's directory
    sent = json.dumps(server.requests[0].messages)
    assert f"The working directory is {below.resolve()}." in sent
    assert "Use lists." in sent and "Be brief." not in sent


def test_a_shared_directorys_servers_are_not_started_and_the_run_says_why(
    cli: Cli, server: ScriptedModelServer
) -> None:
    # As in /tmp: anyone may write there, and another user left an .mcp.json above us.
    shared = cli.cwd / "shared"
    mine = shared / "mine"
    mine.mkdir(parents=True)
    shared.chmod(0o1777)
    ran = cli.cwd / "ran"
    theirs = {"command": "sh", "args": ["-c", f"touch {ran}"]}
    (shared / ".mcp.json").write_text(json.dumps({"mcpServers": {"theirs": theirs}}))
    os.chown(shared / ".mcp.json", NOBODY, NOBODY)
    cli.at(mine).configure(server.base_url)
    why = "it belongs to nobody (uid 65534), not to you or root (anyone could have put it there)"
    server.push(Step(text="Hi."))
    result = cli.at(mine)("exec", "Hello?", env=KEY)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hi.\n"
    assert f"plait: not using {shared / '.mcp.json'}: {why}\n" in result.stderr
    assert not ran.exists()
    server.push(Step(text="Hi again."))
    told = cli.at(mine)("-v", "exec", "--last", "Hello?", env=KEY)
    assert told.returncode == 0, told.stderr
    assert f"WARNING plait._project: not using {shared / '.mcp.json'}: {why}\n" in told.stderr
    assert "plait.cli: configuration: plait.toml\n" in told.stderr  # not theirs
    assert "MCP server theirs" not in told.stderr and not ran.exists()


def test_verbose_names_the_files_the_store_the_model_and_each_server(
    cli: Cli, server: ScriptedModelServer
) -> None:
    test_server = f'command = "{sys.executable}"\nargs = ["{TEST_SERVER}"]\n'
    config = cli.configure(server.base_url, f"[mcp_servers.t]\n{test_server}")
    server.push(Step(text="Hi."))
    quiet = cli("exec", "Hello?", env=KEY)
    assert quiet.returncode == 0, quiet.stderr
    assert "configuration:" not in quiet.stderr and "POST" not in quiet.stderr

    server.push(Step(text="Hi again."))
    told = cli("-v", "exec", "--last", "Hello?", env=KEY)
    assert told.returncode == 0, told.stderr
    assert "plait.cli: configuration: plait.toml\n" in told.stderr  # named as from here
    assert "plait.cli: store: .plait/plait.db\n" in told.stderr
    assert f"plait.cli: model: scripted-model at {server.base_url}\n" in told.stderr
    command = shlex.join([sys.executable, str(TEST_SERVER)])
    assert f"plait.cli: MCP server t: command {command}\n" in told.stderr
    # The session's log lists the server's tools: it starts when first called, and says so.
    assert (
        "plait.cli: MCP server t: its tools as the log lists them; started when first called\n"
        in told.stderr
    )
    assert "POST" not in told.stderr  # the requests are -vv's
    server.push(Step(text="Hi, new session."))
    fresh = cli("-v", "exec", "Hello?", env=KEY)
    assert re.search(r"plait\.cli: MCP server t: ready after \d+ ms, \d+ tools\n", fresh.stderr)

    server.push(Step(text="And again."))
    detailed = cli("-vv", "exec", "--last", "Hello?", env=KEY)
    assert detailed.returncode == 0, detailed.stderr
    sent = server.requests[-1].headers["content-length"]
    url = re.escape(f"{server.base_url}/chat/completions")
    pattern = rf"plait\.model: POST {url}: {sent} bytes sent, HTTP 200, first byte after \d+ ms"
    assert re.search(pattern + r", total \d+ ms\n", detailed.stderr), detailed.stderr

    read = cli("-v", "sessions")
    assert read.returncode == 0, read.stderr
    assert "plait.cli: store: .plait/plait.db\n" in read.stderr
    above = cli.cwd / "below"
    above.mkdir()
    read = cli.at(above)("-v", "sessions")
    assert f"plait.cli: configuration: {config}\n" in read.stderr  # named in full from below
    assert f"plait.cli: store: {cli.store}\n" in read.stderr


def test_a_broken_server_table_stops_only_the_commands_that_start_servers(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(server.base_url, '[mcp_servers.git]\ncomand = "mcp-server-git"\n')
    session = cli.record("b")
    problem = "plait.toml: mcp_servers.git: unknown key 'comand'"
    for args in (["sessions"], ["log", session], ["audit", session], ["history", session]):
        result = cli(*args)
        assert result.returncode == 0, result.stderr
        [warning] = [line for line in result.stderr.splitlines() if "plait: warning" in line]
        assert warning.startswith(f"plait: warning: {problem} (known: ")
        assert result.stdout
    assert cli("verify", session).returncode == 0
    result = cli("exec", "--last", "Go on.", env=KEY)
    assert result.returncode == 1
    assert result.stderr.startswith(f"plait: {problem} (known: ")
    assert not server.requests


def test_a_value_out_of_a_few_is_refused_with_the_choices(cli: Cli) -> None:
    cli.configure("http://127.0.0.1:9/v1", '[policy]\napproval = "sometimes"\n')
    result = cli("sessions")
    assert result.returncode == 1
    assert result.stderr == (
        "plait: plait.toml: policy.approval: invalid value 'sometimes': choose one of never, "
        "on-request, on-write, untrusted\n"
    )
