"""What a compaction asked for did, said to the user: ``plait compact`` and chat's ``/compact``
(docs/compaction.md#when-it-runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

import msgspec

from plait._errors import PlaitError
from plait.cli import _output as render

if TYPE_CHECKING:
    from plait.events import EventStore
    from plait.runtime import TaskOutcome

__all__ = ["report_compaction"]


def report_compaction(
    store: EventStore,
    session_id: str,
    cid: str,
    before: int,
    outcome: TaskOutcome,
    stdout: TextIO,
    stderr: TextIO,
    json: bool = False,
) -> None:
    """Say what the compaction of conversation ``cid`` queued after seq ``before`` did
    (``plait compact``, and chat's ``/compact``)."""
    from plait.events import HistoryCompacted

    if not outcome.ok:
        raise PlaitError(f"compaction of conversation {cid} {outcome.status}: {outcome.detail}")
    done = [e for e in store.read(session_id, after=before) if e.conversation_id == cid]
    compacted = next((e.body for e in done if isinstance(e.body, HistoryCompacted)), None)
    if compacted is None:
        stderr.write(f"conversation {cid}: nothing to compact (its history is already short)\n")
        return
    row = {"conversation_id": cid, **msgspec.structs.asdict(compacted)}
    text = render.json_line(row) if json else render.compaction_row(cid, compacted)
    stdout.write(text if text.endswith("\n") else text + "\n")
