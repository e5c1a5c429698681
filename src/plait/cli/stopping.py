"""Stopping on purpose: SIGTERM and SIGINT to a command that runs sessions.

The first signal stops the command: its sessions are handed back, each running task given the
grace period (``--grace-sec``) and then cut with the cause ``shutdown``, every lease released at
once; the command exits with one line and the conventional code (``128 + signal``). A second
signal exits at once (docs/processes.md#stopping).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plait.runtime import Runtime

__all__ = ["DEFAULT_GRACE_SEC", "Signals", "Stopped", "stop_runtimes"]

DEFAULT_GRACE_SEC = 5.0
"""How long a running task may take to end once the command is told to stop."""

STOP_TIMEOUT_SEC = 5.0
"""How long a cut task's actors may take to record its end, once cut."""


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


class Signals:
    """Handles SIGTERM and SIGINT while the command runs (a ``with`` block, in the main thread).

    The first raises ``Stopped`` where the main thread is (``raising``), or only sets
    ``first`` for a loop to look at; a second writes one line and exits at once, with the
    first's code: what ran is left as after a crash."""

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT), *,
                 raising: bool = True) -> None:  # fmt: skip
        self.signals = tuple(signals)
        self.raising = raising
        self.first: Stopped | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Signals:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Stopped):
            return  # kept until the process ends: a second signal exits at once
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None:
            self.first = Stopped(signum)
            if self.raising:
                raise self.first
            return
        name = signal.Signals(signum).name
        with contextlib.suppress(Exception):  # the main thread may be writing it
            sys.stdout.flush()
        line = (
            f"plait: stopped at once by a second signal ({self.first.name}, then {name}): what "
            "ran is left as after a crash, for the next owner once its lease lapses\n"
        )
        os.write(2, line.encode())
        os._exit(self.first.code)


def stop_runtimes(runtimes: Iterable[Runtime], grace_sec: float, stopped: Stopped) -> str:
    """Hand back every session of ``runtimes`` (``Runtime.drain`` with ``grace_sec``), and
    return what the one line says of it: ``stopped by SIGTERM: task T stopped at checkpoint 2,
    session S handed back``."""
    from plait.events.types import TaskCompleted, TurnAborted

    reason = f"plait was stopped by {stopped.name}"
    said: list[str] = []
    for runtime in runtimes:
        before = {s: runtime.store.last_seq(s) for s in runtime.owned}
        runtime.drain(STOP_TIMEOUT_SEC, grace_sec=grace_sec, reason=reason)
        for session_id, seq in before.items():
            parts = []
            for event in runtime.store.read(session_id, after=seq):
                body = event.body
                if isinstance(body, TurnAborted) and body.cause in ("shutdown", "forced_close"):
                    parts.append(f"task {event.task_id} stopped at checkpoint {body.checkpoint}")
                elif isinstance(body, TaskCompleted):
                    parts.append(f"task {event.task_id} ended")
            said.append(", ".join([*parts, f"session {session_id} handed back"]))
    return f"{stopped.line}: {'; '.join(said)}" if said else stopped.line
