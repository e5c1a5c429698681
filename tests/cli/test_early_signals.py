"""Signals from the process's first line to its exit (docs/processes.md#stopping): SIGTERM and
SIGINT to ``plait exec`` and ``plait worker`` as they start, while their imports run, and as a
task ends. Real processes, real signals; each case is sent a few times, at moments spread over
the stretch it covers, and every outcome is checked: one line and the signal's code, or the
command's own end when the signal came after it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from plait.events import SqliteStore
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

IMPORTED = "import time:"
"""How ``python -X importtime`` begins each line it writes to stderr, a module imported."""

MARKS = (10, 40, 100, 200, 350, 700)
"""After how many imports, counted from the first of plait's modules, a signal is sent. The
first few (``plait``, ``plait.cli._lifetime``, ``plait.cli``, what they import) come before the
program's first line (``plait.cli.run``) puts its handlers in; the parser's are done after about
55; then ``main`` imports the command's module (``plait worker``'s after about 115, ``plait
exec``'s about 210) and runs it, and the command imports the runtime (about 350) and the model's
client (openai, about 1,000) under its own handlers. Each case checks which of these stretches
its marks fell in (``STRETCHES``)."""

COMMAND_MODULE = {"exec": "plait.cli._run_commands", "worker": "plait.cli._worker"}
"""The module ``main`` imports to run each command."""

STRETCHES = ("the parser's imports", "the command's imports", "the command running")
"""Where a signal sent at a mark can fall, as the imports seen so far tell; a case's marks fall
in every one."""

DELAYS_SEC = (0.0, 0.01, 0.02, 0.04, 0.1, 0.3)
"""How long after the answer's line the two SIGTERMs come, round after round, until one comes
after the process's exit (its end takes a few tens of milliseconds here, more when busy)."""

SLOW = Step(text="Counting:\n" + "one " * 2000, chunk_chars=10, chunk_delay=0.1)
"""A reply that streams for minutes, should a command get that far."""


Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def start(cli: Cli) -> Iterator[Start]:
    """Start ``python -X importtime -m plait ARGS`` in ``cli``'s directory: stderr says each
    module as it is imported. Each process is killed and its pipes closed as the test ends,
    should it fail with one still running."""
    started: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "plait", *args],
            cwd=cli.cwd,
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield run
    for process in started:
        process.kill()  # nothing if it has ended
        process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def said(err: str) -> list[str]:
    """What the command wrote to stderr, without importtime's lines."""
    return [line for line in err.splitlines() if not line.startswith(IMPORTED)]


def imported(lines: list[str]) -> list[str]:
    """The modules ``lines`` say were imported, in the order their imports ended."""
    return [line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith(IMPORTED)]


def imports_of_plait(lines: list[str]) -> int:
    """How many modules ``lines`` say were imported, counted from the first of plait's."""
    names = imported(lines)
    first = next((i for i, name in enumerate(names) if name.split(".")[0] == "plait"), None)
    return 0 if first is None else len(names) - first


def stretch(lines: list[str], command: str) -> str:
    """Which of ``STRETCHES`` the process is in, as the imports ``lines`` name tell."""
    names = imported(lines)
    if COMMAND_MODULE[command] in names:  # main has imported it: it runs the command
        return STRETCHES[2]
    return STRETCHES[1] if "plait.cli._parser" in names else STRETCHES[0]


def no_lease_live(cli: Cli) -> bool:
    """Whether every session of the directory's store has its lease released (or none)."""
    if not cli.store.exists():
        return True
    with SqliteStore(cli.store) as store:
        leases = [store.leases.get(info.stream) for info in store.streams()]
    return all(lease is None or not lease.live for lease in leases)


def assert_stopped_with_one_line(code: int, err: str, sig: int) -> None:
    """The signal's code, and one line saying so, its last; no traceback."""
    name = signal.Signals(sig).name
    lines = said(err)
    assert "Traceback" not in err, err[-2000:]
    assert code == 128 + sig, f"exit code {code}: {lines}"
    stop = rf"plait: (worker )?stopped (by {name}\b|at once by a second signal \({name}, )"
    assert re.match(stop, lines[-1]), lines
    assert [line for line in lines if line.startswith("plait:")] == [lines[-1]], lines


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("command", ["exec", "worker"])
def test_a_signal_as_the_command_starts_stops_it_with_one_line(
    cli: Cli, server: ScriptedModelServer, start: Start, command: str, sig: int
) -> None:
    # Issue 47 item 4: in the first 0.6 s (imports), SIGINT printed a KeyboardInterrupt
    # traceback (rc -2) and SIGTERM ended the command with no line (rc -15).
    cli.configure(server.base_url)
    server.push(*[SLOW] * (len(MARKS) + 1))
    args = ["exec", "--grace-sec", "0", "How many?"] if command == "exec" else ["worker"]

    # Right after it is started: most often the interpreter has not run plait's first line
    # yet, and the system's default ends it (nothing is held then); past that line, the
    # stop is plait's.
    process = start(*args)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    names = [line.rsplit("|", 1)[-1].strip() for line in err.splitlines()]
    before_plait = "plait.cli" not in names or names[-1] == "plait.cli"  # no import after it
    if process.returncode == -sig:  # then it had not run its first line
        assert before_plait, said(err)
    elif process.returncode == 1 and "Fatal Python error: init_import_site" in err:
        # Python's own end: the KeyboardInterrupt came as it imported `site`, before plait's.
        assert sig == signal.SIGINT and before_plait, said(err)
    else:
        assert_stopped_with_one_line(process.returncode, err, sig)

    # While its imports run, at moments spread over them: the parser's, then those main
    # makes to run the command, then the command's own as it starts.
    stretches = []
    for mark in MARKS:
        process = start(*args)
        assert process.stderr is not None
        seen: list[str] = []
        while imports_of_plait(seen) < mark:
            line = process.stderr.readline()
            assert line, f"it ended before {mark} imports: {said(''.join(seen))}"
            seen.append(line)
        process.send_signal(sig)
        stretches.append(stretch(seen, command))
        _, rest = process.communicate(timeout=60)
        assert_stopped_with_one_line(process.returncode, "".join(seen) + rest, sig)
        assert no_lease_live(cli)
    assert set(stretches) == set(STRETCHES), list(zip(MARKS, stretches, strict=True))


def test_two_sigterms_as_a_task_ends_exit_with_one_line(
    cli: Cli, server: ScriptedModelServer
) -> None:
    # Issue 47 item 5: two SIGTERMs 1 ms apart as a task ended gave rc -15 and no line: the
    # command's handlers were gone as it tore down. Sent at moments spread over its end (from
    # the answer's line to past the process's exit), they stop it with one line, or, once the
    # command has ended, leave it its own end.
    cli.configure(server.base_url)
    outcomes: list[int] = []
    for delay in DELAYS_SEC:
        if 0 in outcomes:  # they came after its exit: later ones would too
            break
        server.push(Step(text="Done."))
        running = cli.spawn("exec", "How many?")
        process = running.process
        assert running.out.next() == "Done.\n"  # the task has ended; its command ends
        time.sleep(delay)  # not a wait for something: where in its end they land
        process.send_signal(signal.SIGTERM)
        time.sleep(0.001)
        process.send_signal(signal.SIGTERM)
        assert process.stderr is not None
        with process.stderr as stderr:
            err = stderr.read()
        code = process.wait(60)
        running.out.close()
        outcomes.append(code)
        if code == 0:  # the command had ended, and said nothing of the signals
            assert not [line for line in said(err) if line.startswith("plait:")], err
        else:  # the second exits at once, as after a crash: its lease lapses
            assert_stopped_with_one_line(code, err, signal.SIGTERM)
    assert set(outcomes) <= {0, 143}, outcomes
