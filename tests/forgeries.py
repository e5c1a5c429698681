"""The forgeries an insider makes of signed sessions (issue #33's audit).

Each is a function of a ``Target`` (the insider's raw SQL on one store, the session forged,
another of the same key, the attacker's own key, the witness file) that forges the session
with ``insider.Insider`` (content put in new blobs, the chain re-hashed consistently,
positions kept dense, the head row set) and says whether it applied. ``FORGERIES`` lists
them; ``signed_sessions.Lab`` makes them one at a time on honest sessions, checks and undoes
them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from insider import AttackerKey, Insider, Record, Sign, append_witness_line, witness_lines

__all__ = ["FORGERIES", "Forgery", "Target"]


@dataclass
class Target:
    """What a forgery works on: the insider's access, the session it forges, another session
    of the same store and key (``donor``), the attacker's key and the witness file."""

    insider: Insider
    stream: str
    donor: str
    attacker: AttackerKey
    our_fingerprint: str
    witness: Path

    def log(self, stream: str | None = None) -> list[Record]:
        return self.insider.log(stream or self.stream)

    def write(self, records: list[Record], sign: Sign | None = None) -> bool:
        """Make ``records`` the session's log (``Insider.rewrite``); True: it applied."""
        self.insider.rewrite(self.stream, records, sign)
        return True


def _kind(record: Record) -> str:
    return str(record["body"]["type"])


def _heads(log: list[Record]) -> list[int]:
    """Indices of the signed heads."""
    return [i for i, r in enumerate(log) if _kind(r) == "HeadSigned"]


def _copied(log: list[Record]) -> int:
    """How many events at the log's start a fork copied from its source (its first event,
    ``SessionStarted``, names it): its source's signed heads sign them, not its own."""
    origin = log[0]["body"].get("forked_from")
    return int(origin["at_seq"]) if origin else 0


def _signed(
    log: list[Record], kind: str, test: Callable[[Record], bool] = bool, *, copied: bool = False
) -> int | None:
    """Index of the first event of ``kind`` (that ``test`` accepts) that one of the session's
    own signed heads covers, or, with ``copied``, one its source's does (a fork's)."""
    heads = _heads(log)
    start, end = (1, _copied(log)) if copied else (_copied(log), heads[-1] if heads else 0)
    found = (i for i in range(start, end) if _kind(log[i]) == kind and test(log[i]))
    return next(found, None)


def _has(field: str) -> Callable[[Record], bool]:
    """Whether an event's ``field`` holds content: text, or a blob reference."""
    return lambda r: _is_content(r["body"].get(field))


def _is_content(value: object) -> bool:
    return (isinstance(value, str) and bool(value)) or (
        isinstance(value, dict) and value.get("kind") == "blob"
    )


def _call_or_reply(log: list[Record]) -> int | None:
    """Index of the first signed tool call's result, or else of the first signed reply."""
    at = _signed(log, "ToolCallCompleted")
    return _signed(log, "ModelResponded") if at is None else at


def _edit_tool_output(t: Target, log: list[Record], *, copied: bool = False) -> int | None:
    """Change the first signed tool output of ``log``; return its index."""
    at = _signed(log, "ToolCallCompleted", _has("output"), copied=copied)
    if at is not None:
        body = log[at]["body"]
        body["output"] = t.insider.with_text(
            body["output"], "300 " + t.insider.text(body["output"])
        )
    return at


def _edit_model_reply(t: Target, log: list[Record]) -> int | None:
    """Change the first signed reply, and the task's last message where it repeats it (a
    careful insider); return its index."""
    at = _signed(log, "ModelResponded", _has("text"))
    if at is None:
        return None
    body = log[at]["body"]
    old, body["text"] = body["text"], t.insider.with_text(body["text"], "Nothing to see here.")
    for record in log[at:]:
        if _kind(record) == "TaskCompleted" and record["body"].get("last_assistant_message") == old:
            record["body"]["last_assistant_message"] = body["text"]
    return at


def _edit_something(t: Target, log: list[Record]) -> bool:
    return _edit_tool_output(t, log) is not None or _edit_model_reply(t, log) is not None


def edit_tool_output(t: Target) -> bool:
    log = t.log()
    return _edit_tool_output(t, log) is not None and t.write(log)


def edit_tool_argument(t: Target) -> bool:
    """The arguments recorded for the call, and in the model's reply that asked for it."""
    log = t.log()
    at = _signed(log, "ToolCallRequested", _has("arguments"))
    if at is None:
        return False
    body = log[at]["body"]
    arguments = json.loads(t.insider.text(body["arguments"]))
    forged = t.insider.with_text(body["arguments"], json.dumps({**arguments, "forged": "yes"}))
    replies = [r["body"] for r in log[:at] if _kind(r) == "ModelResponded"]
    for asked in (c for reply in replies for c in reply.get("tool_calls", [])):
        if asked.get("id") == body["call_id"]:
            asked["arguments"] = forged
    body["arguments"] = forged
    return t.write(log)


def edit_user_prompt(t: Target) -> bool:
    log = t.log()

    def texts(r: Record) -> list[dict[str, Any]]:
        items = r["body"]["plan"].get("input_items", [])
        return [i for i in items if i.get("type") == "input_text" and _is_content(i.get("text"))]

    at = _signed(log, "TaskEnqueued", lambda r: bool(texts(r)))
    if at is None:
        return False
    item = texts(log[at])[0]
    item["text"] = t.insider.with_text(item["text"], "Delete everything.")
    return t.write(log)


def edit_model_reply(t: Target) -> bool:
    log = t.log()
    return _edit_model_reply(t, log) is not None and t.write(log)


def drop_last(count: int) -> Callable[[Target], bool]:
    """Drop the last ``count`` events, where they hold a signed head (the events after the
    last one, unsigned, are not protected: docs/event-log.md#signed-heads)."""

    def forge(t: Target) -> bool:
        log = t.log()
        if not any(_kind(r) == "HeadSigned" for r in log[-count:]):
            return False
        return t.write(log[:-count])

    return forge


def truncate_to_earlier_head(t: Target) -> bool:
    """Cut the log back to the signed head before the last one: whole tasks gone, and what
    is left signed."""
    log = t.log()
    heads = _heads(log)
    return len(heads) >= 2 and t.write(log[: heads[-2] + 1])


def delete_middle(t: Target) -> bool:
    log = t.log()
    at = _call_or_reply(log)
    return at is not None and t.write(log[:at] + log[at + 1 :])


def reorder(t: Target) -> bool:
    """Swap a tool call's result with the event before it (or a model reply's)."""
    log = t.log()
    at = _call_or_reply(log)
    if at is None or _kind(log[at - 1]) == "HeadSigned":
        return False
    log[at - 1], log[at] = log[at], log[at - 1]
    return t.write(log)


def resign(claim_ours: bool) -> Callable[[Target], bool]:
    """Change a tool output (or a reply) and sign every head again with the attacker's key,
    naming it as its own, or naming ours."""

    def forge(t: Target) -> bool:
        log = t.log()
        if not _edit_something(t, log):
            return False
        claim = t.our_fingerprint if claim_ours else None
        return t.write(log, sign=t.attacker.signer(claim))

    return forge


def splice_task(t: Target) -> bool:
    """Keep the first signed task, then put the donor's later tasks, with their signed heads
    (the same key's), in place of the rest."""
    log, donor = t.log(), t.log(t.donor)
    mine, theirs = _heads(log), _heads(donor)
    if not mine or len(theirs) < 2:
        return False
    return t.write(log[: mine[0] + 1] + donor[theirs[0] + 1 : theirs[-1] + 1])


def another_sessions_log(claim_fork: bool) -> Callable[[Target], bool]:
    """The donor's whole log, signed heads and all, as this session's; with ``claim_fork``,
    its first event saying it is the donor's fork, copied up to the donor's last signed head
    (as a fork made without the key, which its own heads would prove, says)."""

    def forge(t: Target) -> bool:
        log = t.log(t.donor)
        if claim_fork:
            at = log[_heads(log)[-1]]["seq"]
            log[0]["body"]["forked_from"] = {"stream": t.donor, "at_seq": at}
        return t.write(log)

    return forge


def replay_witness_line(t: Target) -> bool:
    """Cut the log back to the signed head before the last one, and append that head's
    witness line to the witness file again, so that the latest line names it."""
    log = t.log()
    heads = _heads(log)
    if len(heads) < 2:
        return False
    earlier = log[heads[-2]]
    if t.witness.exists():
        lines = [
            line
            for line in witness_lines(t.witness)
            if line.get("stream") == t.stream
            and line.get("seq") in (earlier["seq"], earlier["seq"] - 1)
        ]
        if lines:
            append_witness_line(t.witness, lines[-1])
    return t.write(log[: heads[-2] + 1])


def edit_then_drop_signatures(t: Target) -> bool:
    """Change a tool output and drop every signed head after it: the log then looks like one
    a crash cut after its last signed head."""
    log = t.log()
    at = _edit_tool_output(t, log)
    if at is None:
        return False
    return t.write([r for i, r in enumerate(log) if i < at or _kind(r) != "HeadSigned"])


def claim_a_fork(of_itself: bool) -> Callable[[Target], bool]:
    """Change a tool output (or a reply), and make the first event say the session is a fork,
    up to its last signed head, of another (the donor) or of itself: its heads then read as
    copied, checked against the source they name."""

    def forge(t: Target) -> bool:
        log = t.log()
        heads = _heads(log)
        if _copied(log) or not heads or not _edit_something(t, log):
            return False
        source = t.stream if of_itself else t.donor
        log[0]["body"]["forked_from"] = {"stream": source, "at_seq": log[heads[-1]]["seq"]}
        return t.write(log)

    return forge


def edit_a_forks_copy(t: Target) -> bool:
    """Change a tool output in the events a fork copied from its source (its source's own
    are left alone)."""
    log = t.log()
    return _edit_tool_output(t, log, copied=True) is not None and t.write(log)


def erase_unasked(t: Target) -> bool:
    """Delete a tool output's content, as an erasure does (docs/storage.md#erasure), and
    record an erasure nobody asked for after the last event: a ``ContentErased`` covering it."""
    log = t.log()
    at = _signed(log, "ToolCallCompleted", _has("output"))
    if at is None or not isinstance(output := log[at]["body"]["output"], dict):
        return False
    t.insider.delete_content(output["sha256"])
    erased = {
        "type": "ContentErased",
        "upto_seq": len(log),
        "requested_by": "privacy desk",
        "reason": "request 1142",
        "events": 1,
        "blobs": 1,
        "size": output["size"],
    }
    last = log[-1]
    return t.write([*log, {**last, "v": 1, "body": erased}])


@dataclass(frozen=True)
class Forgery:
    """One way to forge a session, and whether only a witness can tell it."""

    name: str
    forge: Callable[[Target], bool]
    """Forge the target; return whether it applies to it (it has what is forged)."""
    needs_witness: bool = False
    """Only the witness of the latest signed heads can tell it (docs/event-log.md#threat-model:
    the log cut back, or a session passed off as a fork its own heads do not prove yet); the
    public key alone should tell the others."""


FORGERIES = [
    Forgery("edit a tool output", edit_tool_output),
    Forgery("edit a tool argument", edit_tool_argument),
    Forgery("edit a user prompt", edit_user_prompt),
    Forgery("edit a model reply", edit_model_reply),
    Forgery("drop the last event", drop_last(1), needs_witness=True),
    Forgery("drop the last 3 events", drop_last(3), needs_witness=True),
    Forgery("truncate to an earlier signed head", truncate_to_earlier_head, needs_witness=True),
    Forgery("delete an event in the middle", delete_middle),
    Forgery("reorder two events", reorder),
    Forgery("re-sign with another key", resign(claim_ours=False)),
    Forgery("re-sign with another key, naming ours", resign(claim_ours=True)),
    Forgery("splice another session's tasks", splice_task),
    Forgery("another session's log as this one", another_sessions_log(claim_fork=False)),
    Forgery(
        "another session's log, as its fork",
        another_sessions_log(claim_fork=True),
        needs_witness=True,
    ),
    Forgery("replay an old witness line", replay_witness_line, needs_witness=True),
    Forgery("edit, drop the signatures after it", edit_then_drop_signatures, needs_witness=True),
    Forgery("edit, then claim to be a fork", claim_a_fork(of_itself=False)),
    Forgery("edit, then claim to be a fork of itself", claim_a_fork(of_itself=True)),
    Forgery("edit what a fork copied", edit_a_forks_copy),
    Forgery("erase a tool output, unasked", erase_unasked),
]
"""Each forgery re-hashes the chain consistently and sets the head: the chain alone says ok."""
