"""``plait chat``: a session on a terminal, one task per line typed.

Each line is a task of the session's root conversation, or a ``/`` command (``/help``); a
task's ``@path`` references attach files (``_chat_input.py``); its text streams as it comes. When a
tool hands the work to another conversation, a line says which conversation runs now, and
another when the caller's continuation resumes. Ctrl-C interrupts the running task, not the
program; a second Ctrl-C while it ends, or Ctrl-C or Ctrl-D at the prompt, leaves.

A tool call the approval policy asks for is put to the person: ``approve TOOL ARGS? [y]es
once / [s]ession / [c]onversation / [n]o``. Ctrl-D there denies it; Ctrl-C interrupts the
task, which ends the question.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from types import FrameType
from typing import Any, TextIO

from plait._errors import InvalidInputError, SessionFailedError, undecoded_byte
from plait._project import find_project, usable
from plait.actors import ApprovalDecision, ApprovalRequest, Promise, lone_surrogate, undecodable
from plait.cli._chat_commands import ChatCommands
from plait.cli._chat_input import Command, Problem, read_line
from plait.cli._live import LivePrinter
from plait.cli._spinner import Spinner
from plait.cli._style import Style
from plait.events import Event, ToolApprovalRequested, ToolCallRequested, Transient, as_text
from plait.runtime import SessionHandle, Unrecorded

__all__ = ["ANSWERS", "PROMPT", "TerminalApprover", "chat"]

PROMPT = "you> "
"""What the prompt looks like."""
MORE = "...> "
"""The prompt of a line that goes on the one above (which ended in ``\\``)."""
ANSWERS = "[y]es once / [s]ession / [c]onversation / [n]o"
"""The answers to an approval question."""
_SCOPES = {"y": "once", "yes": "once", "s": "session", "c": "conversation"}


class TerminalApprover:
    """The approver of ``plait chat``: the person answers on the terminal, in the main thread
    (which reads every line typed); the runtime's approval waits for that answer here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, Promise[ApprovalDecision]] = {}
        self._answers: dict[str, ApprovalDecision] = {}

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Wait for the person's answer to ``request`` (cancelled by an abort or a timeout)."""
        promise: Promise[ApprovalDecision] = Promise()
        with self._lock:
            answer = self._answers.pop(request.call_id, None)
            if answer is not None:  # answered before it was asked for
                return answer
            self._waiting[request.call_id] = promise
        try:
            return await promise
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
        waiting.settle(decision)

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
    commands: ChatCommands,
    stdin: TextIO,
    out: TextIO,
    err: TextIO,
    approver: TerminalApprover | None = None,
) -> int:
    """Run the conversation until the person leaves; return the exit code (0, or 130 when a
    second Ctrl-C cut a task's end short). Call it from the main thread: it handles SIGINT.
    ``commands`` holds the session (``/new``, ``/resume`` and ``/model`` change it);
    ``approver`` (the runtime's) gets the answers to the approval questions asked here."""
    ctrl_c = _CtrlC(commands.session, err)
    style = Style.for_args(commands.args, out)
    lines = _Lines(stdin, out, style)
    previous = signal.signal(signal.SIGINT, ctrl_c)
    err.write(
        f"session {commands.session.session_id}: /help lists the commands, Ctrl-C interrupts "
        "a task, Ctrl-D leaves\n"
    )
    try:
        while True:
            line = lines.read()
            if line is None:  # end of input
                out.write("\n")
                return 0
            if not line.strip():
                continue
            what = read_line(line, commands.workdir, commands.customs)
            if isinstance(what, Problem):
                err.write(style.yellow(f"[{what.message}]") + "\n")
                continue
            if isinstance(what, Command):
                if not commands.run(what, out, err):
                    return 0
                ctrl_c.session = commands.session
                continue
            for name in what.attached:
                err.write(style.dim(f"[attached {name}]") + "\n")
            session = commands.session
            live = LivePrinter(session.root_conversation_id, out, style, Spinner.for_stream(err))
            printer = _Screen(live, approver, ctrl_c, stdin, out)
            ctrl_c.running, ctrl_c.pressed = True, 0
            shown = Unrecorded(session.root_conversation_id)  # what the log did not take
            try:
                outcome = session.run(what.input, on_item=shown.then(printer))
            except KeyboardInterrupt:
                return 130
            except SessionFailedError:  # one line from plait's main, after this one
                if shown.text:
                    out.write("\n[the answer above was not recorded: the session failed]\n")
                raise
            except InvalidInputError as exc:  # nothing was sent: the person types it again
                err.write(style.yellow(f"[{exc}]") + "\n")
                continue
            finally:
                live.close()
                ctrl_c.running = False
                if approver is not None:
                    approver.forget()
            if outcome.status not in ("completed", "interrupted"):
                ended = f"[the task ended {outcome.status}: {outcome.detail}]"
                err.write(style.outcome(ended, outcome.status) + "\n")
            out.write("\n")
    except KeyboardInterrupt:  # at the prompt
        out.write("\n")
        return 0
    finally:
        lines.save()
        signal.signal(signal.SIGINT, previous)


class _Lines:
    """What the person types: a line, or several joined where one ends in ``\\``; with line
    editing and a history (kept in the project's ``.plait/chat_history``) when typed on a
    terminal."""

    def __init__(self, stdin: TextIO, out: TextIO, style: Style) -> None:
        self.stdin, self.out = stdin, out
        self.prompts = {p: style.bold(p) for p in (PROMPT, MORE)}
        self.history: str | None = None
        self.edit = stdin is sys.stdin and out is sys.stdout and stdin.isatty()
        if self.edit:
            try:
                import readline  # line editing for input(), where the platform has it
            except ImportError:
                self.edit = False
            else:
                # readline counts what is between \001 and \002 as taking no room
                self.prompts = {
                    p: re.sub("(\x1b\\[[0-9;]*m)", "\x01\\1\x02", shown)
                    for p, shown in self.prompts.items()
                }
                # The project's, wherever in it the chat runs (docs/configuration.md), unless
                # its .plait/ is another user's: then the lines are kept for this chat only.
                home = find_project().home
                history = home / ".plait" / "chat_history"
                if usable(history, home):
                    self.history = str(history)
                    with contextlib.suppress(OSError):
                        readline.read_history_file(self.history)

    def read(self) -> str | None:
        """The next line (joined lines), or ``None`` at the end of input."""
        parts: list[str] = []
        prompt = PROMPT
        while True:
            line = self._one(prompt)
            if line is None:
                return "\n".join(parts) if parts else None
            if not line.endswith("\\"):
                return "\n".join([*parts, line])
            parts.append(line[:-1])
            prompt = MORE

    def _one(self, prompt: str) -> str | None:
        prompt = self.prompts[prompt]
        try:
            if self.edit:
                try:
                    line = input(prompt) + "\n"
                except EOFError:
                    return None
            else:
                self.out.write(prompt)
                self.out.flush()
                line = self.stdin.readline()
        except UnicodeDecodeError as exc:  # nothing is sent: the person types it again
            self._not_utf8(undecodable(exc))
            return ""
        offset = lone_surrogate(line)  # a byte read with surrogateescape (docs/event-log.md#text)
        if offset is not None:
            byte = undecoded_byte(line[offset])
            what = f"U+{ord(line[offset]):04X}" if byte is None else f"byte 0x{byte:02x}"
            self._not_utf8(f"{what} at character {offset}")
            return ""
        return line.removesuffix("\n") if line else None

    def _not_utf8(self, where: str) -> None:
        self.out.write(
            f"[your input is not valid UTF-8 ({where}); check the terminal's encoding; "
            "nothing was sent]\n"
        )

    def save(self) -> None:
        """Keep the lines typed for the next chat."""
        if self.history is not None:
            import readline

            with contextlib.suppress(OSError):
                os.makedirs(os.path.dirname(self.history), exist_ok=True)
                readline.write_history_file(self.history)


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
