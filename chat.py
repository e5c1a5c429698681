"""``plait chat``: a session on a terminal, one task per line typed.

Each line is a task of the session's root conversation; its text streams as it comes. When a
tool hands the work to another conversation, a line says which conversation runs now, and
another when the caller's continuation resumes. Ctrl-C interrupts the running task, not the
program; a second Ctrl-C while it ends, or Ctrl-C or Ctrl-D at the prompt, leaves.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import TextIO

from plait.live import LivePrinter
from plait.runtime import SessionHandle

__all__ = ["PROMPT", "chat"]

PROMPT = "you> "
"""What the prompt looks like."""


def chat(session: SessionHandle, stdin: TextIO, out: TextIO, err: TextIO) -> int:
    """Run the conversation until the person leaves; return the exit code (0, or 130 when a
    second Ctrl-C cut a task's end short). Call it from the main thread: it handles SIGINT."""
    printer = LivePrinter(session.root_conversation_id, out)
    ctrl_c = _CtrlC(session, err)
    previous = signal.signal(signal.SIGINT, ctrl_c)
    err.write(f"session {session.session_id}: Ctrl-C interrupts a task, Ctrl-D leaves\n")
    try:
        while True:
            out.write(PROMPT)
            out.flush()
            line = stdin.readline()
            if not line:  # end of input
                out.write("\n")
                return 0
            if not line.strip():
                continue
            ctrl_c.running, ctrl_c.pressed = True, 0
            try:
                outcome = session.run(line.strip(), on_item=printer)
            except KeyboardInterrupt:
                return 130
            finally:
                ctrl_c.running = False
            if outcome.status not in ("completed", "interrupted"):
                err.write(f"[the task ended {outcome.status}: {outcome.detail}]\n")
            out.write("\n")
    except KeyboardInterrupt:  # at the prompt
        out.write("\n")
        return 0
    finally:
        signal.signal(signal.SIGINT, previous)


class _CtrlC:
    """SIGINT: the first while a task runs interrupts it; any other leaves."""

    def __init__(self, session: SessionHandle, err: TextIO) -> None:
        self.session, self.err = session, err
        self.running = False
        self.pressed = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.pressed += 1
        if not self.running or self.pressed > 1:
            raise KeyboardInterrupt
        self.err.write("\n[interrupting the task; Ctrl-C again leaves]\n")
        self.err.flush()
        self.session.interrupt()
