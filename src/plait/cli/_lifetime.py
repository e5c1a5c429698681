"""SIGTERM and SIGINT to the ``plait`` process from its first line to its exit.

Python's defaults are wrong for a command that says what a signal did: SIGINT raises
``KeyboardInterrupt`` wherever the program is (a traceback, while it imports), SIGTERM ends it
with no line, and Python puts both back to those defaults as it exits. This module is the
first the program runs (``plait.cli.run``); it imports nothing of plait's, so that its handlers
are in before the heavy imports (docs/processes.md#stopping).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

__all__ = ["LIFETIME", "Lifetime"]

STOPS = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask the process to stop."""


class Lifetime:
    """The process's handlers for SIGTERM and SIGINT, through three phases.

    - **starting** (``start``), until the command runs: nothing is held yet, so a signal ends
      the process at once with one line, ``plait: stopped by SIGTERM``, and the conventional
      code (143, or 130 for SIGINT);
    - **running** (``run``): a command that stops cleanly puts its own handlers over these
      (``Signals``) and puts these back as it ends; for the others, SIGINT raises
      ``KeyboardInterrupt`` as Python's default does (``plait log --follow`` ends on it), and
      SIGTERM ends the process at once, with one line;
    - **ending** (``end``), once the command has returned and said what it had to: a signal
      ends the process at once with the command's own code and no further line; ``quiet``,
      called once what the process wrote is flushed, ignores them for the interpreter's own
      exit (where Python would put back the defaults: a SIGTERM would end it with -15).

    Used by nothing but the program: ``main`` called in a process of its own (a test's, an
    embedder's) leaves that process's handlers alone, as every method is a no-op until
    ``start``.
    """

    def __init__(self) -> None:
        self.phase = ""
        """``starting``, ``running``, ``ending``, ``quiet``; empty when not started."""
        self.code = 0
        """The command's exit code, once it has ended."""

    def start(self) -> None:
        """Handle the signals from here on: the first thing the program does.

        A SIGINT its starter ignores stays ignored, for the whole run: a shell starts a
        background job so (``plait worker &`` in a script), that a Ctrl-C meant for the
        command in front leaves it running (docs/processes.md#stopping)."""
        self.phase = "starting"
        for signum in handled():
            signal.signal(signum, self._handle)

    def run(self) -> None:
        """The command runs: from here it may handle the signals itself."""
        if self.phase:
            self.phase = "running"

    def end(self, code: int) -> None:
        """The command has ended with ``code``: from here a signal exits with that code."""
        if not self.phase:
            return
        self.phase, self.code = "ending", code
        signal.set_wakeup_fd(-1)  # a command's watcher of the signals: its part is over
        for signum in handled():
            signal.signal(signum, self._handle)  # over the command's own, kept by a stop

    def quiet(self) -> None:
        """Ignore the signals for the interpreter's exit (what was written is flushed)."""
        if not self.phase:
            return
        self.phase = "quiet"
        for signum in STOPS:
            signal.signal(signum, signal.SIG_IGN)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.phase == "running" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        for stream in (sys.stdout, sys.stderr):  # what was written first (a pipe may be gone)
            with contextlib.suppress(Exception):
                stream.flush()
        if self.phase == "ending":
            os._exit(self.code)  # its line, if it had one, is said
        with contextlib.suppress(OSError):
            os.write(2, f"plait: stopped by {signal.Signals(signum).name}\n".encode())
        os._exit(128 + signum)  # nothing is held that a clean-up would release


def handled() -> tuple[int, ...]:
    """The signals of ``STOPS`` this process handles: not a SIGINT it ignores (one its starter
    made it ignore, as a shell does a background job's)."""
    return tuple(
        signum
        for signum in STOPS
        if signum != signal.SIGINT or signal.getsignal(signum) is not signal.SIG_IGN
    )


LIFETIME = Lifetime()
"""The process's one ``Lifetime``."""
