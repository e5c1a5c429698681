"""Audit: every tool call of a session, filtered, as rows or JSON Lines; and the chain check.

Each row is one call from request to outcome: conversation, task, call id, fully-qualified
tool, arguments, the MCP server it went to, approval and who decided it, outcome (``ok``,
``error``, ``timeout``, ``refused``, ``unknown`` after a crash, ``pending``), output size,
duration, and when it was requested, sent and answered.

Under every storage policy: a ``headers_only`` or expired ``ttl`` conversation's rows hold
``Redacted`` (hash and size) for their arguments; a ``none`` conversation's calls are not in
the log, and auditing that conversation alone says so.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from plait._errors import ContentUnavailableError, UnknownSessionError
from plait.events import EventStore, Policies, Verification
from plait.events.projections import AuditProjection, AuditRow

__all__ = ["AuditRow", "audit", "audit_jsonl", "verify"]


def audit(
    store: EventStore,
    session_id: str,
    *,
    tool: str | None = None,
    conversation_id: str | None = None,
    outcome: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[AuditRow]:
    """Return the session's tool calls in request order, keeping those that match every filter.

    ``tool`` matches the fully-qualified name, or a server's prefix ending in ``__``
    (``git__``); ``since``/``until`` bound the request time.
    """
    events = store.read(session_id)
    if not events:
        raise UnknownSessionError(session_id)
    policy = Policies(events).of.get(conversation_id or "")
    if policy is not None and policy.kind == "none":
        raise ContentUnavailableError(
            session_id,
            f"audit conversation {conversation_id}",
            "it is stored with storage policy none: its tool calls were not recorded",
        )
    rows = AuditProjection().fold(events).rows

    def keep(row: AuditRow) -> bool:
        if (
            tool is not None
            and row.tool != tool
            and not (tool.endswith("__") and row.tool.startswith(tool))
        ):
            return False
        if conversation_id is not None and row.conversation_id != conversation_id:
            return False
        if outcome is not None and row.outcome != outcome:
            return False
        if since is not None and row.requested_at < since:
            return False
        return until is None or row.requested_at <= until

    return [row for row in rows if keep(row)]


def audit_jsonl(rows: list[AuditRow]) -> bytes:
    """Return ``rows`` as JSON Lines, one object per call, field names as in ``AuditRow``."""
    encode = msgspec.json.Encoder().encode
    return b"".join(encode(row) + b"\n" for row in rows)


def verify(store: EventStore, session_id: str) -> Verification:
    """Walk the session's hash chain and blob references; name the first tampered seq."""
    if store.last_seq(session_id) == 0:
        raise UnknownSessionError(session_id)
    return store.verify(session_id)
