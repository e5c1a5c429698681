"""``plait completion``: scripts made from the parser, which a shell completes with."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from plait.cli.flags import SHELLS
from plait.cli.parser import build_parser

if TYPE_CHECKING:
    from conftest import Cli

COMMANDS = [
    name
    for action in build_parser()._actions
    if action.dest == "command"
    for name in (action.choices or {})
]


@pytest.mark.parametrize("shell", SHELLS)
def test_each_shell_gets_every_command_and_the_global_options(cli: Cli, shell: str) -> None:
    result = cli("completion", shell)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert {"exec", "chat", "tree", "show", "completion"} <= set(COMMANDS)
    first_words = script.split('"") words="', 1)[-1].split('"', 1)[0].split()  # bash: commands
    declared = {  # how each shell's script declares a command, not just mentions its name
        "bash": lambda name: name in first_words,
        "zsh": lambda name: f"'{name}:" in script,
        "fish": lambda name: f"-n __fish_use_subcommand -a {name} " in script,
    }[shell]
    for name in COMMANDS:
        assert declared(name), name
    for option in ("color", "verbose", "store", "session", "outcome"):
        assert (f"-l {option}" if shell == "fish" else f"--{option}") in script, option
    assert "auto always never" in script


def complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of ``words`` (``plait`` first), with ``script`` loaded."""
    line = " ".join(f"'{w}'" for w in words)
    program = f"""{script}
COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}
_plait
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_options_and_their_values(cli: Cli) -> None:
    script = cli("completion", "bash").stdout
    assert complete(script, "plait", "tre") == ["tree"]
    assert complete(script, "plait", "tra") == ["trace"]
    assert complete(script, "plait", "--store", "x.db", "se") == ["sessions"]
    assert complete(script, "plait", "--color", "") == ["auto", "always", "never"]
    assert complete(script, "plait", "audit", "3f2a", "--outcome", "e") == ["error"]
    assert "--last" in complete(script, "plait", "exec", "--la")
    assert complete(script, "plait", "show", "3f2a", "--j") == ["--json"]


def test_bash_completes_the_shells_of_completion_and_the_options_of_resume(cli: Cli) -> None:
    script = cli("completion", "bash").stdout
    assert complete(script, "plait", "completion", "") == ["bash", "zsh", "fish"]
    assert complete(script, "plait", "completion", "z") == ["zsh"]
    assert complete(script, "plait", "res") == ["resume"]
    assert complete(script, "plait", "resume", "--la") == ["--last"]


@pytest.mark.parametrize(
    ("shell", "offered"),
    [
        ("zsh", "completion) _arguments "),
        ("fish", "complete -c plait -n '__fish_seen_subcommand_from completion' -x -a "),
    ],
)
def test_zsh_and_fish_offer_the_shells_after_completion(cli: Cli, shell: str, offered: str) -> None:
    script = cli("completion", shell).stdout
    (line,) = [line for line in script.splitlines() if offered in line]
    shells = "'1:completion:(bash zsh fish)'" if shell == "zsh" else "'bash zsh fish'"
    assert shells in line
