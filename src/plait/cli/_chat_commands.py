"""The ``/`` commands of ``plait chat``: what each does to the chat's session or prints.

The commands that read the log (``/sessions``, ``/conversations``, ``/history``, ``/stats``,
``/audit``) run their subcommand, on this session, with the arguments given: ``/history
--limit 5`` prints what ``plait history SESSION --limit 5`` prints. The others act through the
chat's runtime, which owns the session: ``/compact``, ``/approval``, ``/new``, ``/resume``, and
``/model``, which goes on with the session on a runtime of another model.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from plait._errors import PlaitError
from plait.cli._chat_input import BUILTIN, Command, custom_commands, description
from plait.cli._common import find_conversation, find_session
from plait.cli._instructions import session_instructions
from plait.cli._plan_view import tool_prefs
from plait.events import APPROVAL_POLICIES, EventStore, SessionStarted
from plait.runtime import Runtime, SessionHandle

__all__ = ["ChatCommands"]

_READS = ("sessions", "conversations", "history", "stats", "audit")
"""The commands that are their subcommand on this session (``sessions``: on the store)."""


class ChatCommands:
    """What a chat holds besides its loop: its runtime, session and options."""

    def __init__(
        self,
        args: argparse.Namespace,
        store: EventStore,
        store_url: str,
        open_runtime: Callable[[str | None], Runtime],
        session_id: str | None,
        workdir: Path,
    ) -> None:
        """``open_runtime(model)`` makes a runtime on ``store`` (the configured model for
        ``None``), which ``store_url`` names; the chat starts a new session, or goes on with
        ``session_id``."""
        self.args, self.store, self.store_url, self.workdir = args, store, store_url, workdir
        self._open_runtime = open_runtime
        self.runtime = open_runtime(None)
        self.session = self._session(session_id)
        self.customs = custom_commands(workdir)

    def _session(self, session_id: str | None) -> SessionHandle:
        if session_id is not None:
            return self.runtime.resume(session_id)
        return self.runtime.start_session(
            user_instructions=session_instructions(self.workdir), tool_prefs=tool_prefs(self.args)
        )

    def close(self) -> None:
        """Close the session (the person left the chat), then the runtime."""
        try:
            self.session.close(reason="closed by the user (the chat ended)")
        finally:
            self.runtime.close()

    def run(self, command: Command, out: TextIO, err: TextIO) -> bool:
        """Do ``command``; return whether the chat goes on. A user's error is one line."""
        try:
            return self._run(command, out, err)
        except (PlaitError, SystemExit) as exc:  # argparse exits on bad arguments
            if isinstance(exc, PlaitError):
                err.write(f"/{command.name}: {' '.join(str(exc).split())}\n")
            return True

    def _run(self, command: Command, out: TextIO, err: TextIO) -> bool:
        name, args = command.name, command.args
        if name == "quit":
            return False
        if name == "help":
            self._help(out)
        elif name in _READS:
            self._subcommand(name, args, out)
        elif name == "compact":
            self._compact(args, out, err)
        elif name == "approval":
            self._approval(args, out)
        elif name == "model":
            self._model(args, out)
        elif name in ("new", "resume"):
            found = find_session(self.store, args[0]) if name == "resume" and args else None
            if name == "resume" and found is None:
                raise PlaitError("which session? /resume ID (see /sessions)")
            self.session.release()
            self.session = self._session(found)
            out.write(f"session {self.session.session_id}\n")
        return True

    def _help(self, out: TextIO) -> None:
        width = max(len(n) for n in [*BUILTIN, *self.customs]) + 2
        for name, what in BUILTIN.items():
            out.write(f"/{name:<{width}}{what}\n")
        for name, path in self.customs.items():
            out.write(f"/{name:<{width}}{description(path)} ({path})\n")
        out.write("@path attaches a file to the task; a line ending in \\ goes on below\n")

    def _subcommand(self, name: str, args: list[str], out: TextIO) -> None:
        """Run ``plait NAME SESSION ARGS`` (``plait sessions ARGS``) on the chat's store."""
        from plait.cli._parser import build_parser

        out.flush()
        where = ["--store", self.store_url]
        if self.args.config:
            where += ["--config", self.args.config]
        session = [] if name == "sessions" else [self.session.session_id]
        parsed = build_parser().parse_args([name, *session, *args, *where])
        parsed.func(parsed)

    def _compact(self, args: list[str], out: TextIO, err: TextIO) -> None:
        from plait.cli._compacting import report_compaction

        cid = self.session.root_conversation_id
        if args:
            ids = [info.id for info in self.session.conversations()]
            cid = find_conversation(ids, self.session.session_id, args[0])
        before = self.store.last_seq(self.session.session_id)
        outcome = self.session.compact(cid)
        report_compaction(self.store, self.session.session_id, cid, before, outcome, out, err)

    def _approval(self, args: list[str], out: TextIO) -> None:
        started = self.store.read(self.session.session_id, limit=1)[0].body
        policy = started.approval_policy if isinstance(started, SessionStarted) else "never"
        if not args:
            out.write(f"approval policy: {policy} (the session's; a conversation may narrow it)\n")
            return
        if args[0] not in APPROVAL_POLICIES:
            raise PlaitError(f"{args[0]!r} is not a policy: {', '.join(APPROVAL_POLICIES)}")
        self.session.change_context(approval_policy=args[0])
        out.write(
            f"approval policy {args[0]} from the next task (narrowed to the session's "
            f"{policy} if wider)\n"
        )

    def _model(self, args: list[str], out: TextIO) -> None:
        if not args:
            out.write(f"model: {self.runtime.settings.model.model}\n")
            return
        session_id = self.session.session_id
        self.session.release()  # handed to the runtime of the other model
        self.runtime.close()
        self.runtime = self._open_runtime(args[0])
        self.session = self.runtime.resume(session_id)
        out.write(f"model: {self.runtime.settings.model.model} from the next task\n")
