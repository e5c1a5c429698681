"""Colour and the spinner on a terminal only; ``--verbose`` logs to stderr."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scripted import call
from terminal import Terminal

from plait.cli import main
from plait.cli._style import Style, wants_color
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

SGR = re.compile(r"\x1b\[[\d;]*m")
"""A colour code."""
SCRIPT = [
    Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count.")]),
    Step(text="Two."),
    Step(text="The helper counted two."),
]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "choice", "env", "coloured"),
    [
        (True, "auto", {"TERM": "xterm"}, True),
        (True, None, {"TERM": "xterm"}, True),
        (False, "auto", {"TERM": "xterm"}, False),
        (True, "auto", {"TERM": "dumb"}, False),
        (True, "auto", {"TERM": "xterm", "NO_COLOR": "1"}, False),
        (True, "auto", {"TERM": "xterm", "NO_COLOR": ""}, True),  # empty: not set
        (False, "auto", {"FORCE_COLOR": "1"}, True),
        (False, "auto", {"FORCE_COLOR": ""}, False),
        (False, "always", {"NO_COLOR": "1"}, True),
        (True, "never", {"TERM": "xterm", "FORCE_COLOR": "1"}, False),
    ],
)
def test_who_gets_colour(
    tty: bool, choice: str | None, env: dict[str, str], coloured: bool
) -> None:
    stream = Tty() if tty else io.StringIO()
    assert wants_color(stream, choice, env) is coloured
    style = Style.for_stream(stream, choice, env)
    assert (style.red("x") != "x") is coloured


def test_plain_style_returns_text_unchanged() -> None:
    plain = Style()
    assert [plain.bold("a"), plain.dim("b"), plain.outcome("error"), plain.cyan("")] == [
        "a",
        "b",
        "error",
        "",
    ]
    assert Style(True).outcome("ok") == "\x1b[32mok\x1b[0m"
    assert Style(True).outcome("whatever") == "whatever"


def run_on_terminal(cwd: Path, env: dict[str, str], *args: str) -> str:
    """What a person sees of ``plait ARGS`` run on a terminal, until it ends."""
    term = Terminal([sys.executable, "-m", "plait", *args], cwd, env)
    term.expect("The helper counted two.")
    assert term.exit_code() == 0
    return term.seen


def test_exec_on_a_terminal_colours_and_spins_but_not_in_a_pipe(cli: Cli) -> None:
    env = {**cli.env, "OPENAI_API_KEY": "test", "TERM": "xterm"}
    env.pop("NO_COLOR", None), env.pop("FORCE_COLOR", None)
    with ScriptedModelServer(SCRIPT * 3) as server:
        cli.configure(server.base_url)
        seen = run_on_terminal(cli.cwd, env, "exec", "Count them.")
        assert "-> \x1b[1mconv_create\x1b[0m" in seen  # the tool call, in bold
        assert "\x1b[32mok\x1b[0m" in seen  # its outcome, green
        assert "\x1b[36m[conversation " in seen  # the switch of conversation
        assert "waiting for the model" in seen and "\r\x1b[K" in seen  # the spinner, erased
        # The spinner is erased before the answer: the answer's line holds only the answer.
        lines = seen.replace("\r\x1b[K", "\n").splitlines()
        assert "The helper counted two." in lines

        piped = cli("exec", "Count them.", env={"OPENAI_API_KEY": "test", "TERM": "xterm"})
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout == "Asking a helper.\nThe helper counted two.\n"
        assert "\x1b[" not in piped.stderr and "-> conv_create(" in piped.stderr

        quiet = run_on_terminal(cli.cwd, {**env, "NO_COLOR": "1"}, "exec", "Count them.")
        assert not SGR.search(quiet) and "-> conv_create(" in quiet


def test_color_always_colours_a_pipe_and_json_never(recorded: Cli) -> None:
    plain = recorded("sessions")
    assert "\x1b[" not in plain.stdout
    coloured = recorded("--color", "always", "sessions")
    assert "\x1b[1mrec-1\x1b[0m" in coloured.stdout
    assert SGR.sub("", coloured.stdout) == plain.stdout  # the same text, painted
    forced = recorded("sessions", env={"FORCE_COLOR": "1"})
    assert forced.stdout == coloured.stdout
    for command in (["audit", "rec"], ["stats", "rec"], ["log", "rec"], ["tree", "rec"]):
        painted = recorded(*command, "--color", "always").stdout
        assert SGR.search(painted), command
        assert SGR.sub("", painted) == recorded(*command).stdout, command
    json = recorded("sessions", "--json", "--color", "always").stdout
    assert "\x1b[" not in json


def test_verbose_sends_the_plait_loggers_to_stderr(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    logger = logging.getLogger("plait")
    level, handlers = logger.level, list(logger.handlers)
    try:
        cli.record("v")
        assert main(["-v", "--store", str(cli.store), "sessions"]) == 0
        assert logger.getEffectiveLevel() == logging.INFO
        logging.getLogger("plait.mcp").info("a server said hello")
        logging.getLogger("plait.mcp").debug("not shown at -v")
        err = capsys.readouterr().err
        assert "INFO plait.mcp: a server said hello" in err and "not shown" not in err
    finally:
        for handler in logger.handlers[:]:
            if handler not in handlers:
                logger.removeHandler(handler)
        logger.setLevel(level)
