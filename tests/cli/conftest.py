"""Running ``plait`` as a user does: a subprocess in a directory of its own, with its own
``plait.toml``, against a ``ScriptedModelServer`` of the test's and real MCP servers."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest
from scripted import HELPER_SCRIPT, record_session

from plait.actors import ModelSettings
from plait.events import SqliteStore
from plait.runtime import Runtime, RuntimeSettings

SCRUBBED = ("OPENAI_", "PLAIT_", "OTEL_")
"""Variables of the test's own environment that would change what plait reads."""


class Lines:
    """A pipe's lines as they are written, each waited for with a timeout (never slept for)."""

    def __init__(self, pipe: IO[str]) -> None:
        self._pipe = pipe
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        for line in self._pipe:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, timeout: float = 30.0) -> str:
        """Return the next line; fail if none comes within ``timeout`` seconds."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s") from None
        assert line is not None, "the pipe closed"
        return line

    def until(self, text: str, timeout: float = 30.0) -> list[str]:
        """Return the lines up to and including the first that contains ``text``."""
        seen = [self.next(timeout)]
        while text not in seen[-1]:
            seen.append(self.next(timeout))
        return seen

    def rest(self) -> list[str]:
        """Wait for the writer's end of the pipe to close; return the lines not yet read."""
        self.close()
        lines = []
        while (line := self._lines.get()) is not None:
            lines.append(line)
        return lines

    def close(self) -> None:
        """Wait for the writer's end of the pipe to close (its process ended), then close it."""
        self._pump.join(30)
        self._pipe.close()


class Running:
    """A ``plait`` process still running: its stdout line by line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        assert process.stdout is not None
        self.out = Lines(process.stdout)
        self._err: Lines | None = None

    @property
    def err(self) -> Lines:
        """Its stderr line by line (then ``stop`` cannot read it whole)."""
        if self._err is None:
            assert self.process.stderr is not None
            self._err = Lines(self.process.stderr)
        return self._err

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for it to exit by itself; return its exit code (its pipes are closed)."""
        code = self.process.wait(timeout)
        self.out.close()
        if self._err is not None:
            self._err.close()
        elif self.process.stderr is not None:
            self.process.stderr.close()
        return code

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        """Send ``sig``; return the exit code and everything it wrote to stderr."""
        self.process.send_signal(sig)
        assert self.process.stderr is not None
        with self.process.stderr as stderr:
            err = stderr.read()
        code = self.process.wait(30)
        self.out.close()
        return code, err


class Cli:
    """The ``plait`` command in one working directory, with a clean environment."""

    def __init__(self, cwd: Path, config_home: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
        """What every run gets: the test's environment without plait's and OpenAI's, and
        ``config_home`` as ``XDG_CONFIG_HOME``: no ``config.toml``, ``AGENTS.md`` or
        ``commands/`` of the machine's user is read."""
        self.env["XDG_CONFIG_HOME"] = str(config_home)

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python -m plait ARGS`` and wait for it (``env`` adds variables)."""
        return subprocess.run(
            [sys.executable, "-m", "plait", *args],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def spawn(self, *args: str) -> Running:
        """Start ``python -m plait ARGS`` and return at once."""
        process = subprocess.Popen(
            [sys.executable, "-m", "plait", *args],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return Running(process)

    def at(self, cwd: Path) -> Cli:
        """``plait`` run from another directory (one inside this one's project, say)."""
        other = Cli(cwd, Path(self.env["XDG_CONFIG_HOME"]))
        other.env = self.env
        return other

    def configure(self, base_url: str, extra: str = "", *, top: str = "") -> Path:
        """Write a ``plait.toml`` that points at ``base_url`` and sends each request once;
        ``top`` goes before its first table, ``extra`` after ``[model]``."""
        path = self.cwd / "plait.toml"
        model = f'base_url = "{base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
        path.write_text(f"{top}[model]\n{model}{extra}")
        return path

    @property
    def store(self) -> Path:
        """The default store of this directory."""
        return self.cwd / ".plait" / "plait.db"

    def front(self, base_url: str) -> Runtime:
        """A front end's runtime on the default store (owner ``front``), as a service beside
        the commands would have: it submits and follows, and leaves the running to them."""
        settings = ModelSettings(base_url=base_url, api_key="k", model="scripted-model")
        return Runtime(
            str(self.store),
            RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None),
        )

    def verified_and_replayed(self, session: str) -> None:
        """Assert that ``session`` verifies and replays with no difference."""
        assert self("verify", session).returncode == 0
        replayed = self("replay", session, "--json")
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        result = json.loads(replayed.stdout)
        assert result["divergence"] is None and result["events"] == result["total"], result

    def record(self, prefix: str, **runtime: Any) -> str:
        """Record a session of ``HELPER_SCRIPT`` (prompts "How many?", "Sure?") in the default
        store; its ids are ``PREFIX-1`` (the session), ``PREFIX-2`` (the root)..."""
        self.store.parent.mkdir(exist_ok=True)
        with SqliteStore(self.store) as store:
            prompts = ["How many?", "Sure?"]
            model = {"model": "scripted-model"}  # as `configure` has it, so replays agree
            return record_session(store, HELPER_SCRIPT, prompts, prefix, model, **runtime)


@pytest.fixture
def cli(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """``plait`` in a fresh directory of the test's, with a user configuration directory of
    its own, empty."""
    return Cli(tmp_path, tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """``plait`` in a directory whose store holds session ``rec-1`` of ``HELPER_SCRIPT``;
    tests only read it."""
    cli = Cli(tmp_path_factory.mktemp("recorded"), tmp_path_factory.mktemp("config"))
    cli.record("rec")
    return cli


@pytest.fixture(scope="session")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A directory where ``plait demo`` ran, once per test process, and what it printed.
    Tests only read it: one that needs a store with the demo's session to write to copies
    it (``demo_here``) rather than run the demo again, which takes seconds."""
    cli = Cli(tmp_path_factory.mktemp("demo"), tmp_path_factory.mktemp("config"))
    ran = cli("demo")
    assert ran.returncode == 0, ran.stderr
    return cli.cwd, ran


@pytest.fixture
def demo_here(cli: Cli, demo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """Leave in ``cli``'s directory what ``plait demo`` run there leaves: a copy of the
    demo's store, the test's own."""
    shutil.copytree(demo_run[0] / ".plait", cli.store.parent)
