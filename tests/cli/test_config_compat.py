"""Config people already have, run by ``plait exec`` unchanged: a Codex ``[mcp_servers]`` block,
a Claude Code ``.mcp.json``, a user-level file and ``-c``; and a server that does not start is
one warning line while the task goes on with the others."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scripted import call

from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

if TYPE_CHECKING:
    from conftest import Cli

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"
TOKEN = "s3cret-token-7f1c"
"""The HTTP server's bearer token: only in the environment, never in a file or the log."""
STDIO = f'command = "{sys.executable}"\nargs = ["{TEST_SERVER}"]\n'


def header(name: str) -> ScriptedToolCall:
    """A call of the remote server's ``header`` tool (``call`` takes ``name`` itself)."""
    return ScriptedToolCall("remote__header", json.dumps({"name": name}))


def session_of(stderr: str) -> str:
    first = stderr.splitlines()[0].split()
    assert first[0] == "session", stderr
    return first[1]


@pytest.fixture
def bearer_server() -> Iterator[Callable[..., str]]:
    """Start the test MCP server over streamable HTTP, refusing requests without the bearer
    token of ``$TEST_TOKEN``; return its URL."""
    started: list[subprocess.Popen[str]] = []

    def start() -> str:
        process = subprocess.Popen(
            [sys.executable, str(TEST_SERVER), "http", "--bearer-env", "TEST_TOKEN"],
            stdout=subprocess.PIPE,
            text=True,
            env={"TEST_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        )
        started.append(process)
        assert process.stdout is not None
        readable, _, _ = select.select([process.stdout], [], [], 20.0)  # its "listening" line
        assert readable, "the HTTP test server did not start in 20 s"
        line = process.stdout.readline()
        assert line.startswith("listening on "), line
        return line.split()[-1]

    yield start
    for process in started:
        process.terminate()
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()


def no_secret_stored(cli: Cli) -> None:
    """The token is in no file plait wrote: not the store, its WAL, or anything beside."""
    for path in cli.store.parent.iterdir():
        assert TOKEN.encode() not in path.read_bytes(), path


def test_a_codex_mcp_servers_block_works_unchanged(
    cli: Cli, server: ScriptedModelServer, bearer_server: Callable[[], str]
) -> None:
    url = bearer_server()
    # As it stands in a Codex config.toml: stdio and streamable HTTP, Codex's key names.
    codex = f"""
[mcp_servers.local]
{STDIO}startup_timeout_ms = 20_000
tool_timeout_sec = 30.0
enabled_tools = ["echo", "add"]
env_vars = ["LOCAL_GREETING"]

[mcp_servers.local.env]
MODE = "test"

[mcp_servers.remote]
url = "{url}"
bearer_token_env_var = "REMOTE_TOKEN"
http_headers = {{ "X-Team" = "tools" }}
env_http_headers = {{ "X-Region" = "REMOTE_REGION" }}
enabled_tools = ["header"]
"""
    cli.configure(server.base_url, codex)
    server.push(
        Step(tool_calls=[call("local__add", a=2, b=3), header("x-region")]),
        Step(tool_calls=[header("x-team")]),
        Step(text="Five, from eu-west, for tools."),
    )
    env = {"REMOTE_TOKEN": TOKEN, "REMOTE_REGION": "eu-west"}
    result = cli("exec", "Add and ask.", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Five, from eu-west, for tools.\n"
    offered = sorted(t["function"]["name"] for t in server.requests[0].tools or [])
    assert [n for n in offered if "__" in n] == ["local__add", "local__echo", "remote__header"]
    assert "  <- ok: 5\n" in result.stderr
    assert "  <- ok: eu-west\n" in result.stderr and "  <- ok: tools\n" in result.stderr
    assert "warning" not in result.stderr
    no_secret_stored(cli)

    # Without the token in the environment: the server is not started, and says why.
    server.push(Step(text="No remote today."))
    again = cli("exec", "Again.", env={"REMOTE_REGION": "eu-west"})
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("warning") == 1
    assert (
        "plait: warning: MCP server 'remote' did not start, going on without its tools: "
        "bearer_token_env_var names $REMOTE_TOKEN, which is not set\n"
    ) in again.stderr


def test_the_http_server_refuses_a_request_without_the_token(
    cli: Cli, server: ScriptedModelServer, bearer_server: Callable[[], str]
) -> None:
    url = bearer_server()
    cli.configure(server.base_url, f'[mcp_servers.remote]\nurl = "{url}"\n')
    server.push(Step(text="Nothing to call."))
    result = cli("exec", "Hello?")
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning.startswith("plait: warning: MCP server 'remote' did not start, ")
    assert warning.endswith(
        "initialize failed: the server answered HTTP 401 (are its headers right? "
        "http_headers, env_http_headers, bearer_token_env_var)"
    )


def test_a_claude_code_mcp_json_works_unchanged(
    cli: Cli, server: ScriptedModelServer, bearer_server: Callable[[], str]
) -> None:
    url = bearer_server()
    # As `claude mcp add --scope project` writes it: found in the working directory.
    claude = {
        "mcpServers": {
            "local": {
                "type": "stdio",
                "command": "${PYTHON}",
                "args": [str(TEST_SERVER)],
                "env": {"MODE": "${MODE:-test}"},
            },
            "remote": {
                "type": "http",
                "url": "${REMOTE_URL}",
                "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}", "X-Team": "tools"},
            },
        }
    }
    (cli.cwd / ".mcp.json").write_text(json.dumps(claude, indent=2))
    cli.configure(server.base_url)
    server.push(
        Step(tool_calls=[call("local__echo", text="hi"), header("x-team")]),
        Step(text="Both answered."),
    )
    env = {"PYTHON": sys.executable, "REMOTE_URL": url, "REMOTE_TOKEN": TOKEN}
    result = cli("exec", "Call both.", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Both answered.\n"
    assert "[mcp local: ready," in result.stderr and "[mcp remote: ready," in result.stderr
    assert "  <- ok: hi\n" in result.stderr and "  <- ok: tools\n" in result.stderr
    no_secret_stored(cli)

    # A variable it needs and that is unset: one line naming the file, the key and it.
    result = cli("exec", "Again.", env={"PYTHON": sys.executable, "REMOTE_URL": url})
    assert result.returncode == 1
    assert result.stderr == (
        "plait: .mcp.json: mcpServers.remote: key 'headers.Authorization' "
        "needs ${REMOTE_TOKEN}, which is not set\n"
    )


def test_a_server_that_does_not_start_is_one_warning_and_the_task_goes_on(
    cli: Cli, server: ScriptedModelServer
) -> None:
    cli.configure(
        server.base_url,
        f'[mcp_servers.broken]\ncommand = "no-such-plait-server"\n[mcp_servers.good]\n{STDIO}',
    )
    server.push(Step(tool_calls=[call("good__echo", text="ping")]), Step(text="It said ping."))
    result = cli("exec", "Echo ping.")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "It said ping.\n"
    assert [line for line in result.stderr.splitlines() if "broken" in line] == [
        "plait: warning: MCP server 'broken' did not start, going on without its tools: "
        "command not found: no-such-plait-server"
    ]
    offered = [t["function"]["name"] for t in server.requests[0].tools or []]
    assert "good__echo" in offered and not [n for n in offered if n.startswith("broken__")]
    session = session_of(result.stderr)
    log = cli("log", session).stdout
    assert log.count("McpServerFailed") == 1
    stats = cli("stats", session).stdout
    assert "mcp server broken: did not start: command not found: no-such-plait-server" in stats

    # Codex's `required`: then it stops, as before, before any task runs.
    cli.configure(
        server.base_url,
        '[mcp_servers.broken]\ncommand = "no-such-plait-server"\nrequired = true\n',
    )
    before = len(server.requests)
    result = cli("exec", "Hello?")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "plait: MCP server 'broken' did not start: command not found: no-such-plait-server"
    )
    assert len(server.requests) == before


def test_the_user_file_is_read_under_the_project_file_and_c_goes_last(
    cli: Cli, server: ScriptedModelServer
) -> None:
    xdg = cli.cwd / "xdg"
    (xdg / "plait").mkdir(parents=True)
    (xdg / "plait" / "config.toml").write_text(
        '[model]\nmodel = "user-model"\ntemperature = 0.5\n'
        f'[mcp_servers.broken]\ncommand = "no-such-plait-server"\n[mcp_servers.good]\n{STDIO}'
    )
    cli.configure(server.base_url, "temperature = 0.25\n")  # the project's: model = scripted
    env = {"XDG_CONFIG_HOME": str(xdg)}
    server.push(Step(text="Hello."))
    result = cli("exec", "-c", "mcp_servers.broken.enabled=false", "Hi?", env=env)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr and "[mcp good: ready," in result.stderr
    request = server.requests[-1]
    assert (request.model, request.body["temperature"]) == ("scripted-model", 0.25)

    # -c before or after the command, over the files, the environment and the flags.
    server.push(Step(text="Hello again."))
    result = cli(
        "-c", "model.model=from-c", "exec", "--model", "from-flag",
        "-c", "model.temperature=0", "-c", "mcp_servers.broken.enabled=false", "Hi?",
        env=env | {"PLAIT_MODEL": "from-env"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    request = server.requests[-1]
    assert (request.model, request.body["temperature"]) == ("from-c", 0)

    result = cli("exec", "-c", "model.modle=x", "Hi?", env=env)
    assert result.returncode == 1
    assert result.stderr == "plait: -c model.modle=x: model.modle: unknown key\n"
