"""``plait completion``: each shell's script, and what ``plait`` offers it to complete a line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plait.cli._flags import SHELLS
from plait.cli._parser import build_parser

if TYPE_CHECKING:
    from conftest import Cli

COMMANDS = [
    name
    for action in build_parser()._actions
    if action.dest == "command"
    for name in (action.choices or {})
]


def offered(cli: Cli, line: str) -> list[str]:
    """What ``plait`` offers to complete ``line`` (the cursor at its end), asked as a shell's
    completion script asks it."""
    answer = cli.cwd / "completions"
    env = {
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
    }
    result = cli(env=env)
    assert result.returncode == 0, result.stderr
    return answer.read_text().split()


@pytest.mark.parametrize("shell", SHELLS)
def test_each_shell_gets_a_script_that_completes_plait(cli: Cli, shell: str) -> None:
    result = cli("completion", shell)
    assert result.returncode == 0, result.stderr
    registers = {
        "bash": "complete -o nospace -o default -o bashdefault -F _python_argcomplete plait",
        "zsh": "#compdef plait",
        "fish": "complete --command plait",
    }[shell]
    assert registers in result.stdout


def test_every_command_is_offered(cli: Cli) -> None:
    assert {"exec", "chat", "tree", "show", "completion"} <= set(COMMANDS)
    assert set(offered(cli, "plait ")) == set(COMMANDS)


def test_commands_options_and_their_values_are_completed(cli: Cli) -> None:
    assert offered(cli, "plait tre") == ["tree"]
    assert offered(cli, "plait tra") == ["trace"]
    assert offered(cli, "plait --store x.db se") == ["sessions"]
    assert offered(cli, "plait --color ") == ["auto", "always", "never"]
    assert offered(cli, "plait audit 3f2a --outcome e") == ["error"]
    assert "--last" in offered(cli, "plait exec --la")
    assert offered(cli, "plait show 3f2a --j") == ["--json"]
    for option in ("--color", "--verbose", "--store", "--outcome"):
        assert option in offered(cli, "plait audit 3f2a --")
    assert "--session" in offered(cli, "plait exec --s")


def test_the_shells_of_completion_and_the_options_of_resume_are_completed(cli: Cli) -> None:
    assert offered(cli, "plait completion ") == ["bash", "zsh", "fish"]
    assert offered(cli, "plait completion z") == ["zsh"]
    assert offered(cli, "plait res") == ["resume"]
    assert offered(cli, "plait resume --la") == ["--last"]


def test_bash_with_the_script_loaded_completes_a_command(cli: Cli) -> None:
    script = cli("completion", "bash").stdout
    line = "plait tre"
    program = f"""{script}
COMP_WORDS=(plait tre); COMP_CWORD=1; COMP_LINE='{line}'; COMP_POINT={len(line)}
_python_argcomplete plait
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    # ``plait`` as the shell finds it: this interpreter's, first on the PATH.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cli.cwd,
        env={**cli.env, "PATH": path},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tree"]
