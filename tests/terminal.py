"""A child process on a pseudo-terminal, as a person sees and types into it."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import time
from pathlib import Path

CTRL_C, CTRL_D = b"\x03", b"\x04"


def clean_env() -> dict[str, str]:
    """The test's environment without what would change what plait reads (its
    ``XDG_CONFIG_HOME`` is the run's empty one, set by ``tests/conftest.py``)."""
    assert os.environ.get("XDG_CONFIG_HOME"), "the user's configuration would be read"
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PLAIT_"))}


class Terminal:
    """A child process on a pseudo-terminal, and what it printed so far."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its terminal is the pty
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        self.seen = ""
        self.at = 0

    def expect(self, text: str, timeout: float = 30.0) -> str:
        """Wait until ``text`` is printed after what was expected before; return what came
        in between."""
        deadline = time.monotonic() + timeout
        while (found := self.seen.find(text, self.at)) < 0:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"waited {timeout} s for {text!r}; the terminal shows:\n"
                                     f"{self.seen[self.at:]}")  # fmt: skip
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"the terminal closed before {text!r}:\n{self.seen}")
            self.seen += chunk.decode(errors="replace").replace("\r\n", "\n")
        between, self.at = self.seen[self.at : found], found + len(text)
        return between

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def say(self, line: str, prompt: str = "you> ") -> str:
        """Type ``line`` and Enter; return what is shown before the next ``prompt``."""
        self.send(line.encode() + b"\n")
        return self.expect(prompt)

    def exit_code(self, timeout: float = 30.0) -> int:
        """Wait for the child to end (reading what it prints meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._drain()  # what it printed last may still wait in the terminal
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):  # the child closed the terminal
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
        raise AssertionError(f"the child did not exit; the terminal shows:\n{self.seen[-2000:]}")

    def _drain(self) -> None:
        """Read what the terminal still holds of an ended child, to its end."""
        while select.select([self.fd], [], [], 0)[0]:  # never waits: what is there, now
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # EIO: the child's side is closed and nothing is left
                return
            if not chunk:
                return
            self.seen += chunk.decode(errors="replace")
