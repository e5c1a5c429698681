"""``plait chat``: a session on a terminal, one task per line typed.

Each line is a task of the session's root conversation; its text streams as it comes. When a
tool hands the work to another conversation, a line says which conversation runs now, and
another when the caller's continuation resumes. Ctrl-C interrupts the running task, not the
program; a second Ctrl-C while it ends, or Ctrl-C or Ctrl-D at the prompt, leaves.

A tool call the approval policy asks for is put to the person: ``approve TOOL ARGS? [y]es
once / [s]ession / [c]onversation / [n]o``. Ctrl-D there denies it; Ctrl-C interrupts the
task, which ends the question.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType
from typing import Any, TextIO

from plait.actors.approvals import ApprovalDecision, ApprovalRequest
from plait.cli.live import LivePrinter
from plait.events.types import Event, ToolApprovalRequested, ToolCallRequested, Transient
from plait.events.values import as_text
from plait.runtime import SessionHandle

__all__ = ["ANSWERS", "PROMPT", "TerminalApprover", "chat"]

PROMPT = "you> "
"""What the prompt looks like."""
ANSWERS = "[y]es once / [s]ession / [c]onversation / [n]o"
"""The answers to an approval question."""
_SCOPES = {"y": "once", "yes": "once", "s": "session", "c": "conversation"}


class TerminalApprover:
    """The approver of ``plait chat``: the person answers on the terminal, in the main thread
    (which reads every line typed); the runtime's approval waits for that answer here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._answers: dict[str, ApprovalDecision] = {}

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Wait for the person's answer to ``request`` (cancelled by an abort or a timeout)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ApprovalDecision] = loop.create_future()
        with self._lock:
            answer = self._answers.pop(request.call_id, None)
            if answer is not None:  # answered before it was asked for
                return answer
            self._waiting[request.call_id] = (loop, future)
        try:
            return await future
        finally:
            with self._lock:
                self._waiting.pop(request.call_id, None)

    def answer(self, call_id: str, decision: ApprovalDecision) -> None:
        """Give the person's answer to call ``call_id``, from any thread."""
        with self._lock:
            waiting = self._waiting.pop(call_id, None)
            if waiting is None:
                self._answers[call_id] = decision
                return
        loop, future = waiting

        def give() -> None:
            if not future.done():  # not cancelled meanwhile
                future.set_result(decision)

        loop.call_soon_threadsafe(give)

    def forget(self) -> None:
        """Drop the answers nobody waited for (their wait ended before they were given)."""
        with self._lock:
            self._answers.clear()


class _Screen:
    """What the person sees of a running task, and the approval questions put to them."""

    def __init__(
        self,
        printer: LivePrinter,
        approver: TerminalApprover | None,
        ctrl_c: _CtrlC,
        stdin: TextIO,
        out: TextIO,
    ) -> None:
        self.printer, self.approver, self.ctrl_c = printer, approver, ctrl_c
        self.stdin, self.out = stdin, out
        self.arguments: dict[str, str] = {}

    def __call__(self, item: Event | Transient) -> None:
        self.printer(item)
        if not isinstance(item, Event):
            return
        body = item.body
        if isinstance(body, ToolCallRequested):
            self.arguments[body.call_id] = as_text(body.arguments) or ""
        elif isinstance(body, ToolApprovalRequested) and self.approver is not None:
            decision = self._ask(body)
            if decision is not None:
                self.approver.answer(body.call_id, decision)

    def _ask(self, body: ToolApprovalRequested) -> ApprovalDecision | None:
        """The person's answer; ``None`` when Ctrl-C interrupted the task instead."""
        arguments = self.arguments.pop(body.call_id, "")
        # From here a Ctrl-C raises (see _CtrlC); one pressed before means the task is being
        # interrupted already, and its abort ends the wait: nothing to ask.
        self.ctrl_c.asking = True
        try:
            if self.ctrl_c.pressed:
                return None
            self.out.write(f"\n[{body.reason}]")
            while True:
                self.out.write(f"\napprove {body.tool} {arguments}? {ANSWERS}: ")
                self.out.flush()
                line = self.stdin.readline()
                answer = line.strip().lower()
                if not line or answer in ("n", "no"):
                    why = "denied at the terminal" if line else "no answer at the terminal"
                    return ApprovalDecision(approved=False, reason=why, decided_by="user")
                if answer in _SCOPES:
                    scope: Any = _SCOPES[answer]
                    return ApprovalDecision(approved=True, scope=scope, decided_by="user")
        except KeyboardInterrupt:  # the task is being interrupted: its abort ends the wait
            return None
        finally:
            self.ctrl_c.asking = False


def chat(
    session: SessionHandle,
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
    approver: TerminalApprover | None = None,
) -> int:
    """Run the conversation until the person leaves; return the exit code (0, or 130 when a
    second Ctrl-C cut a task's end short). Call it from the main thread: it handles SIGINT.
    ``approver`` (the runtime's) gets the answers to the approval questions asked here."""
    ctrl_c = _CtrlC(session, err)
    printer = _Screen(LivePrinter(session.root_conversation_id, out), approver, ctrl_c, stdin, out)
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
                if approver is not None:
                    approver.forget()
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
        self.asking = False
        """An approval question waits for its answer: Ctrl-C denies it, and interrupts."""
        self.pressed = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.pressed += 1
        if not self.running or self.pressed > 1:
            raise KeyboardInterrupt
        self.err.write("\n[interrupting the task; Ctrl-C again leaves]\n")
        self.err.flush()
        self.session.interrupt()
        if self.asking:
            raise KeyboardInterrupt  # ends the question; the task ends with it
