"""What each ``plait`` command does, as its help says it, and where the code that runs it is.

The parser describes every command from here without importing that code: the commands'
modules import the runtime, replay, the store, and some openai or mcp, and each start of
``plait`` would pay for all of them (about 0.3 s of CPU before ``plait --version`` printed
anything). A command's module is imported when that command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["COMMANDS", "Command"]


class Command:
    """One command: the function that runs it, named, and imported only when it runs."""

    __slots__ = ("doc", "function", "module")

    def __init__(self, where: str, doc: str) -> None:
        module, _, function = where.partition(":")
        self.module = f"plait.cli._{module}"
        """The module holding the function (``plait.cli._log_commands``)."""
        self.function = function
        """The function's name; it takes the parsed arguments and returns the exit code."""
        self.doc = " ".join(doc.split())
        """What the command does: the first clause is its line in ``plait --help``."""

    def load(self) -> Callable[[argparse.Namespace], int]:
        """Import the command's module; return its function."""
        # As an import statement does, not importlib.import_module: `python -X importtime`
        # times only the statement's way, and shows the module with what it imported.
        __import__(self.module)
        run: Callable[[argparse.Namespace], int] = getattr(sys.modules[self.module], self.function)
        return run

    def __call__(self, args: argparse.Namespace) -> int:
        """Import the command's module and run it (``plait chat``'s ``/log`` does)."""
        return self.load()(args)


COMMANDS = {
    "exec": Command(
        "run_commands:cmd_exec",
        """Run one task to its end, streaming the answer; exit 1 if it does not complete.""",
    ),
    "chat": Command(
        "run_commands:cmd_chat",
        """Talk with a session on the terminal, one task per line (/help lists the commands);
        Ctrl-C interrupts the running task, a second Ctrl-C or Ctrl-D leaves; SIGTERM hands the
        session back.""",
    ),
    "resume": Command(
        "run_commands:cmd_resume",
        """Go on with a stored session in chat, as ``plait chat --session`` does (``--last``:
        the session active last).""",
    ),
    "mcp-server": Command(
        "run_commands:cmd_mcp_server",
        """Serve plait as an MCP server, over stdio (or streamable HTTP with --http PORT): its
        tools run tasks in sessions (run, reply, interrupt) and read the log (history, audit,
        sessions); approvals are asked of the client.""",
    ),
    "compact": Command(
        "run_commands:cmd_compact",
        """Summarise a conversation's older history with the model, keeping the latest
        messages.""",
    ),
    "sessions": Command(
        "log_commands:cmd_sessions",
        """List the sessions in the store, the one active last first: id, last activity,
        events, state (idle, running, waiting, crashed, closed, owned by another process) and
        title.""",
    ),
    "conversations": Command(
        "log_commands:cmd_conversations",
        """List a session's live conversations: who created each, messages, last activity.""",
    ),
    "history": Command(
        "log_commands:cmd_history",
        """Print a conversation's history as chat messages (the root's by default).""",
    ),
    "log": Command(
        "log_commands:cmd_log",
        """Print every event of a session: seq, time, type, conversation, task, body.""",
    ),
    "show": Command(
        "log_commands:cmd_show",
        """Show a session's conversations, histories, audit and chain check; exit 1 if the
        check finds anything edited.""",
    ),
    "audit": Command(
        "log_commands:cmd_audit",
        """List every tool call of a session: tool, server, outcome, size, duration.""",
    ),
    "tree": Command(
        "log_commands:cmd_tree",
        """Draw a session's conversations as a tree (who created whom), each task with its
        start, duration, tool calls and outcome.""",
    ),
    "stats": Command(
        "log_commands:cmd_stats",
        """Show what each conversation of a session did: tasks, turns, tokens, tool calls, MCP
        latency, cancellations, failures; then each MCP server that failed for good.""",
    ),
    "verify": Command(
        "log_commands:cmd_verify",
        """Check a session's rows (hash chain, columns, blobs), its signed heads and witness,
        and the store's file, or an evidence bundle (--bundle); exit 1 if anything was edited
        or is damaged.""",
    ),
    "du": Command(
        "du:cmd_du",
        """Show what the store takes and each session's share: events and bytes by type,
        blobs held and shared, and what a vacuum would give back.""",
    ),
    "trace": Command(
        "trace:cmd_trace",
        """Export recorded sessions as OpenTelemetry GenAI spans over OTLP (--endpoint, else
        [telemetry] otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT), or print them as OTLP JSON
        (--json); the spans are the ones a live export sent, with the same ids.""",
    ),
    "replay": Command(
        "log_commands:cmd_replay",
        """Replay a session from its log, no network or key; exit 1 at the first difference.
        A live session (another process owns it) replays the events written so far, and says
        so. With --live, rerun sessions against the model configured now and report what
        changed.""",
    ),
    "fork": Command(
        "log_commands:cmd_fork",
        """Copy a session's events up to a seq into a new session; print the new session's
        id.""",
    ),
    "recover": Command(
        "run_commands:cmd_recover",
        """Resume every session a stopped process left with a task running or waiting, and run
        its waiting tasks; a session another live process owns is left to it, said on one line
        (docs/processes.md#failover).""",
    ),
    "worker": Command(
        "worker:cmd_worker",
        """Run sessions that need an owner until SIGTERM, then hand them back.""",
    ),
    "export": Command(
        "evidence:cmd_export",
        """Write a session's evidence bundle to one file (-o, never over another): its rows
        byte for byte, its blobs and tombstones, the witness's lines of it; check it anywhere
        with ``plait verify --bundle FILE --public-key KEY.pub``.""",
    ),
    "keygen": Command(
        "keys:cmd_keygen",
        """Make an Ed25519 signing key: the private key at --out (mode 600), the public key at
        --out's path with .pub; set ``[audit] signing_key`` to the first, give ``plait verify
        --public-key`` the second.""",
    ),
    "expire": Command(
        "log_commands:cmd_expire",
        """Delete the content of ``ttl`` conversations that is due; print how many blobs.""",
    ),
    "forget": Command(
        "erase:cmd_forget",
        """Erase a session's content (prompts, replies, reasoning, instructions, tool arguments
        and outputs, attachments) for good, or only that of --conversation; the events, their
        hashes and signatures, and the audit of every call stay, and the erasure is
        recorded.""",
    ),
    "prune": Command(
        "prune:cmd_prune",
        """Remove whole sessions closed (or idle) before a date: their events, heads, leases,
        inboxes and the blobs only they refer to; record each so verify and every read account
        for the gap; give the room back.""",
    ),
    "demo": Command(
        "run_commands:cmd_demo",
        """Run a session offline (a scripted model, a bundled MCP server), then show what its
        log holds and replay it.""",
    ),
    "completion": Command(
        "completion:cmd_completion",
        """Print the shell's completion script: every command and option of plait.""",
    ),
}
"""Every command by name, in the order ``plait --help`` lists them."""
