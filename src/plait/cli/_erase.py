"""``plait forget``: erase what a session's people and tools said, keeping the proof that it
happened (docs/storage.md#erasure)."""

from __future__ import annotations

import argparse
import getpass
import sys

from plait._errors import PlaitError
from plait.cli import _output as render
from plait.cli._common import (
    config_of,
    err,
    find_conversation,
    find_session,
    out,
    signer_of,
    store_of,
)
from plait.cli._words import count

__all__ = ["cmd_forget"]


def cmd_forget(args: argparse.Namespace) -> int:
    """Erase a session's content, or a conversation's, for good (``plait forget``)."""
    from plait.events import ConversationOpened, forget

    config = config_of(args, mcp_servers=False)
    with store_of(config, create=False) as store:
        session = find_session(store, args.session)
        opened = [
            e.conversation_id
            for e in store.read(session, resolve_blobs=False)
            if isinstance(e.body, ConversationOpened) and e.conversation_id
        ]
        named = [find_conversation(opened, session, c) for c in args.conversation or ()]
        what = f"conversation {', '.join(c[:8] for c in named)} of " if named else ""
        if not args.yes and not _confirmed(f"erase the content of {what}session {session[:8]}"):
            err("plait: nothing erased (erasing is for good: confirm, or pass --yes)")
            return 2
        erasure = forget(
            store,
            session,
            conversations=named,
            requested_by=args.by or _user(),
            reason=args.reason or "",
            signer=signer_of(config),
        )
    if args.json:
        out(render.json_line(erasure))
        return 0
    if erasure.again:
        at = f" (at seq {erasure.seq})" if erasure.seq else ""
        out(
            f"session {session[:8]}: its content was erased already{at}; the store's files "
            "were scrubbed again"
        )
        return 0
    kept = ""
    if erasure.kept:
        kept = f"; {count(erasure.kept, 'blob')} kept, held by other conversations"
    signed = "; the head after it signed" if erasure.signed else ""
    out(
        f"erased {what}session {session[:8]}: {count(erasure.blobs, 'blob')} "
        f"({count(erasure.size, 'byte')}) of {count(erasure.events, 'event')}{kept}; "
        f"recorded at seq {erasure.seq}{signed}"
    )
    return 0


def _confirmed(question: str) -> bool:
    """Ask on a terminal; anywhere else, only --yes confirms."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question}? This cannot be undone. [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a container, say)
        raise PlaitError("who asks for the erasure? pass --by NAME") from None
