"""What a ``plait`` command imports as it starts: the parser describes every command without
importing the code that runs them (``plait.cli._commands``), and ``main`` imports the one
command's module. Real processes, ``python -X importtime`` naming each module imported."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from plait.cli._commands import COMMANDS

if TYPE_CHECKING:
    from conftest import Cli

COMMAND_MODULES = {command.module for command in COMMANDS.values()} - {"plait.cli._completion"}
"""The modules that run commands (``completion``'s also gives the parser its shells)."""

HEAVY = {"plait.events", "plait.runtime", "plait.replay", "plait.actors.mcp", "openai", "mcp"}
"""What a command that runs nothing must not import: the store, the runtime, replay, the
clients."""


def imported(cli: Cli, *args: str) -> set[str]:
    """The modules ``plait ARGS`` imports, run in ``cli``'s directory."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "plait", *args],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert lines, done.stderr
    return {line.rsplit("|", 1)[-1].strip() for line in lines}


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["log", "--help"], ["exec", "-h"]])
def test_help_and_version_import_no_command_code(cli: Cli, args: list[str]) -> None:
    names = imported(cli, *args)
    assert "plait.cli._parser" in names
    assert names & (COMMAND_MODULES | HEAVY) == set()


def test_a_command_imports_its_own_code_and_no_other_commands(cli: Cli) -> None:
    session = cli.record("imp")
    names = imported(cli, "log", session)
    assert "plait.cli._log_commands" in names
    assert names & COMMAND_MODULES == {"plait.cli._log_commands"}
    # Reading a log needs the store, not the runtime, replay, or a model or MCP client.
    assert "plait.events" in names
    assert names & {"plait.runtime", "plait.replay", "openai", "mcp"} == set()
