"""``plait`` reads its arguments and a prompt on stdin as UTF-8: bytes that are not are one
line saying which and where, exit 1, before anything runs (docs/event-log.md#text)."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from plait.events import SqliteStore
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


def plait(cli: Cli, *args: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m plait ARGS`` with bytes in and out."""
    return subprocess.run(
        [sys.executable, "-m", "plait", *args],
        cwd=cli.cwd,
        env=cli.env,
        input=stdin,
        capture_output=True,
        timeout=60,
    )


def test_a_prompt_on_stdin_that_is_not_utf8_is_one_line_and_exit_1(cli: Cli) -> None:
    with ScriptedModelServer([Step(text="never")]) as server:
        cli.configure(server.base_url)
        done = plait(cli, "exec", "-", stdin=b"a \xed\xa0\x80 b")
        assert server.requests == []
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == b"plait: the prompt on stdin is not valid UTF-8 (byte 0xed at offset 2)\n"
    assert not cli.store.exists()  # refused before a session was started


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["exec", b"a \xff b"],
            r"argument 2 (b'a \xff b') is not valid UTF-8 (byte 0xff at offset 2)",
        ),
        (["log", b"\xc3("], r"argument 2 (b'\xc3(') is not valid UTF-8 (byte 0xc3 at offset 0)"),
        ([b"--store=x\xedy", "sessions"], "argument 1 (b'--store=x\\xedy') is not valid UTF-8"),
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line_and_exit_1(
    cli: Cli, args: list[str | bytes], line: str
) -> None:
    with ScriptedModelServer([Step(text="never")]) as server:
        cli.configure(server.base_url)
        done = plait(cli, *args)
        assert server.requests == []
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode().startswith(f"plait: {line}")
    assert done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr


def test_a_utf8_prompt_on_stdin_runs(cli: Cli) -> None:
    with ScriptedModelServer([Step(text="oui")]) as server:
        cli.configure(server.base_url)
        done = plait(cli, "exec", "-", stdin="héllo ✓ 😀".encode())
        asked = server.requests[0].messages[-1]["content"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "oui"
    assert asked == "héllo ✓ 😀"


@pytest.mark.parametrize(
    ("args", "stdin", "line"),
    [
        (["exec", ""], b"", 'plait: the prompt is empty: say what to do, e.g. plait exec "Fix'),
        (["exec", " \t\n"], b"", "plait: the prompt is empty"),
        (["exec", "-"], b"", "plait: the prompt on stdin is empty"),
        (["exec", "-"], b"  \n\n", "plait: the prompt on stdin is empty"),
        (["exec", "--session", "rec", ""], b"", "plait: the prompt is empty"),
    ],
)
def test_an_empty_prompt_is_refused_before_anything_is_recorded(
    cli: Cli, args: list[str], stdin: bytes, line: str
) -> None:
    cli.record("rec")
    with SqliteStore(cli.store) as store:
        before = {info.stream: info.last_seq for info in store.streams()}
    with ScriptedModelServer([Step(text="never")]) as server:
        cli.configure(server.base_url)
        done = plait(cli, *args, stdin=stdin)
        assert server.requests == []  # no model was asked
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode().startswith(line), done.stderr
    assert done.stderr.count(b"\n") == 1
    with SqliteStore(cli.store) as store:
        after = {info.stream: info.last_seq for info in store.streams()}
    assert after == before  # no session started, nothing appended to the one named
