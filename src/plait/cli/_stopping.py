"""Stopping on purpose: SIGTERM and SIGINT to a command that runs sessions.

The first signal stops the command: its sessions are handed back, each running task given the
grace period (``--grace-sec``) and then cut with the cause ``shutdown``, every lease released at
once; the command exits with one line and the conventional code (``128 + signal``). A second
signal exits at once (docs/processes.md#stopping). What the log records says who stopped it:
SIGINT is a person's Ctrl-C, SIGTERM the operator's stop (``Stopped.reason``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from plait.cli._common import reader_left

if TYPE_CHECKING:
    from plait.runtime import Runtime

__all__ = ["Signals", "Stopped", "end_line", "stop_runtimes"]

STOP_TIMEOUT_SEC = 5.0
"""How long a cut task's actors may take to record its end, once cut."""

REASONS = {
    signal.SIGINT: "stopped by the user (Ctrl-C)",
    signal.SIGTERM: "stopped by the operator (SIGTERM)",
}
"""Who sent each signal, as the log records it (``TurnAborted.detail``, ``StopRequested``)."""


class Stopped(BaseException):
    """The command was told to stop by a signal (a ``BaseException``, as ``KeyboardInterrupt``
    is: nothing that catches errors catches it)."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")
        self.code = 128 + signum
        """The exit code: 130 for SIGINT, 143 for SIGTERM."""
        self.line = f"stopped by {self.name}"
        """What the command says as it exits (after ``plait: ``); the command completes it."""
        self.at = time.monotonic()
        """When it came: the grace period is counted from there."""
        self.reason = REASONS.get(signal.Signals(signum), f"stopped by {self.name}")
        """Who stopped it, as the log records it."""
        self.fresh_line = False
        """Whether the command ended the terminal's line after the signal came (the ``^C``
        a terminal echoes is on it otherwise), so its last line starts on a line of its own."""


class Signals:
    """Handles SIGTERM and SIGINT while the command runs (a ``with`` block, in the main thread,
    entered before the command takes its first lease).

    The first is recorded (``first``); with ``raising`` it is also raised where the main
    thread is, else only inside ``interruptible()`` (a wait: what the main thread does
    between waits, taking or releasing a lease, is never cut half-done) and at ``check()``;
    one recorded and never raised is raised as the block ends. A second exits at once, with
    one line and the first's code: what ran is left as after a crash. Any number of signals,
    at any moment, so give the clean stop or that exit, never a hang
    (docs/processes.md#stopping)."""

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT), *,
                 raising: bool = True) -> None:  # fmt: skip
        self.signals = tuple(signals)
        self.first: Stopped | None = None
        """The first signal, once one came."""
        self.on_first: Callable[[], None] | None = None
        """Called on a thread of its own when the first comes (to wake a waiting loop)."""
        self._raising = 1 if raising else 0  # > 0: the handler raises the first
        self._previous: dict[int, object] = {}
        self._wakeup: tuple[int, int] | None = None
        self._previous_fd = -1
        self._exiting = threading.Lock()

    def __enter__(self) -> Signals:
        # Every delivery writes its number to a pipe that a thread of ours reads: Python runs
        # a handler once for two signals that come together (``timeout -s INT`` sends two, 1 ms
        # apart), and only in the main thread, which may be in a call that does not return.
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._wakeup = (read, write)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in self.signals:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # a background job's SIGINT
                self._previous[signum] = signal.signal(signum, self._handle)
        threading.Thread(
            target=self._watch, args=(read,), name="plait-signals", daemon=True
        ).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None and self.first is not None:
            raise self.first  # came where nothing was cut: the command stops as it ends
        if isinstance(exc, Stopped):
            return  # kept until the process ends: a second signal exits at once
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        if self._wakeup is not None:
            os.close(self._wakeup[1])  # its reader sees the end and returns
            self._wakeup = None

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Within the block, the first signal raises ``Stopped`` where the main thread is (one
        that came before raises at once)."""
        self._raising += 1
        try:
            self.check()
            yield
        finally:
            self._raising -= 1

    def check(self) -> None:
        """Raise ``Stopped`` if a signal came."""
        if self.first is not None:
            raise self.first

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None:
            self.first = Stopped(signum)
            if self._raising > 0:
                raise self.first
            return
        with contextlib.suppress(Exception):  # the main thread may be writing it
            sys.stdout.flush()
        self._exit_at_once(self.first.name, signal.Signals(signum).name, self.first.code)

    def _watch(self, fd: int) -> None:
        """Read the signals' numbers as they are delivered: wake the command at the first,
        exit at once at the second."""
        seen: list[int] = []
        try:
            while data := os.read(fd, 64):
                seen += [n for n in data if n in self.signals]
                if len(seen) >= 2:
                    first, second = (signal.Signals(n) for n in seen[:2])
                    self._exit_at_once(first.name, second.name, 128 + first)
                if seen and self.on_first is not None:
                    with contextlib.suppress(Exception):  # a closing runtime: it stops anyway
                        self.on_first()
        finally:
            os.close(fd)

    def _exit_at_once(self, first: str, second: str, code: int) -> None:
        if not self._exiting.acquire(blocking=False):
            return  # the other of the handler and the reader is exiting
        line = (
            f"plait: stopped at once by a second signal ({first}, then {second}): what "
            "ran is left as after a crash, for the next owner once its lease lapses\n"
        )
        os.write(2, line.encode())
        os._exit(code)


def end_line(end: Callable[[], None], stopped: Stopped) -> None:
    """End the answer's open line on stdout as the command stops (``end``, the printer's); a
    reader that left with the signal (``plait exec | less``: Ctrl-C ends it too) is let go,
    stdout made ``/dev/null``, so that the stop goes on and the exit writes nothing more."""
    try:
        end()
    except BrokenPipeError:
        reader_left()
        return
    # On a terminal the open line was ended, or the spinner erased the line with its ^C.
    stopped.fresh_line = sys.stdout.isatty()


def stop_runtimes(
    runtimes: Iterable[Runtime],
    grace_sec: float,
    stopped: Stopped,
) -> str:
    """Hand back every session of ``runtimes`` (``Runtime.drain`` with ``grace_sec``, counted
    from the signal), all at once, and return what the one line says of it: ``stopped by
    SIGTERM: task T stopped at checkpoint 2, session S handed back``. The cut records who
    stopped it (``Stopped.reason``), so a Ctrl-C reads as the user's, not the operator's."""
    from plait.events import TaskCompleted, TurnAborted

    reason = stopped.reason
    grace = max(0.0, grace_sec - (time.monotonic() - stopped.at))
    runtimes = list(runtimes)
    before = [{s: runtime.store.last_seq(s) for s in runtime.owned} for runtime in runtimes]
    draining = [
        threading.Thread(
            target=runtime.drain,
            args=(STOP_TIMEOUT_SEC,),
            kwargs={"grace_sec": grace, "reason": reason},
            name="plait-stop",
            daemon=True,
        )
        for runtime in runtimes
    ]
    for thread in draining:
        thread.start()
    for thread in draining:
        thread.join()  # each bounded: grace + STOP_TIMEOUT_SEC (docs/processes.md#stopping)
    said: list[str] = []
    for runtime, seqs in zip(runtimes, before, strict=True):
        for session_id, seq in seqs.items():
            parts = []
            for event in runtime.store.read(session_id, after=seq):
                body = event.body
                if isinstance(body, TurnAborted) and body.cause in ("shutdown", "forced_close"):
                    parts.append(f"task {event.task_id} stopped at checkpoint {body.checkpoint}")
                elif isinstance(body, TaskCompleted):
                    parts.append(f"task {event.task_id} ended")
            said.append(", ".join([*parts, f"session {session_id} handed back"]))
    return f"{stopped.line}: {'; '.join(said)}" if said else stopped.line
