"""Honest signed sessions, and the forgeries an insider makes of them (issue #33's audit).

``record_honest`` records, through the real runtime against ``ScriptedModelServer``, signed
sessions of each kind the audit must vouch for: function tool calls, MCP tool calls (a real MCP
server over streamable HTTP), a ``conv_create`` hand-off, forks (resumed, and not), and a
session cut by a crash after its second task's signed head, whose last events are unsigned.
``World`` is one store holding them (a SQLite file or a PostgreSQL schema) with the keys and
the witness. ``FORGERIES`` are what an insider does with ``insider.Insider`` (raw SQL, the
chain re-hashed consistently, the head row set); ``check`` is what a user runs: ``plait verify
--public-key`` (which reads the witness beside the key). ``Lab`` makes one forgery at a time
on a world's store, checks it and every other session, and undoes it.
``tests/events/test_forgeries.py`` asserts that every forgery is detected and no untouched
session is flagged; ``bench/adversarial.py`` counts both over more sessions.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from insider import AttackerKey, Insider, Record, Sign, append_witness_line, witness_lines
from scripted import (
    HELPER_SCRIPT,
    INVENTORY,
    call,
    crash,
    inventory,
    record_inventory,
    record_session,
)

from plait.actors.mcp import McpServerConfig
from plait.actors.model import ModelSettings
from plait.events import Event, EventStore, HeadSigned
from plait.events.signing import PublicKey, Signer, generate_key
from plait.events.stores import open_store
from plait.events.witness import Witness
from plait.replay import fork
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

__all__ = [
    "FORGERIES",
    "Attempt",
    "Forgery",
    "Lab",
    "Outcome",
    "Target",
    "World",
    "check",
    "record_honest",
]

# --- what a user checks ------------------------------------------------------------------------


class Outcome(NamedTuple):
    """What verifying a session with the public key (and the witness) says."""

    ok: bool
    seq: int | None
    """The seq it names, when not ok."""
    reason: str
    """What it says, for people (when ok: the signed heads checked)."""
    chain_ok: bool
    """What the hash chain alone says (``plait verify`` without the key)."""


def check(
    store: EventStore, session: str, public_key: PublicKey, witness: Witness | None
) -> Outcome:
    """Verify ``session`` as ``plait verify SESSION --public-key KEY.pub`` does: the hash
    chain, then the signed heads against the key and the witness of the latest ones."""
    report = store.verify(session, public_key=public_key, witness=witness)
    signed = report.signatures  # None: the chain is broken
    if not report.ok or signed is None:
        return Outcome(False, report.first_bad_seq, report.reason, signed is not None)
    tail = f"; {signed.unsigned} events after it unsigned" if signed.unsigned else ""
    if signed.copied:
        tail += f"; {signed.copied} of them copied from {signed.copied_from}"
    if signed.witness_seq is not None:
        tail += f"; the witness's at seq {signed.witness_seq}"
    last = f"the last at seq {signed.last_signed_seq}"
    return Outcome(True, None, f"ok: {signed.signed} signed heads, {last}{tail}", True)


# --- the honest sessions -----------------------------------------------------------------------


MCP = [
    Step(tool_calls=[call("t__note", key="k", text="one")]),  # writes: runs alone
    Step(tool_calls=[call("t__echo", text="a"), call("t__add", a=1, b=2)]),  # read-only: parallel
    Step(text="Tools done."),
    Step(text="Echoing.", tool_calls=[call("t__echo", text="again")]),
    Step(text="Echoed."),
]
"""Two tasks calling the test MCP server's tools (``tests/mcp/server.py``)."""

CRASHED = [*INVENTORY, Step(text="cut off " * 20, chunk_chars=2, chunk_delay=0.05)]
"""``INVENTORY``'s two tasks, then a third whose reply the process dies in."""


def _record_crashed(world: World, signer: Signer, prefix: str) -> str:
    """A session with two signed tasks, cut by a crash in its third: its last events (the third
    task's start, its model request) follow the last signed head, unsigned, as a crash leaves
    them."""
    ids = itertools.count(1)
    with ScriptedModelServer(CRASHED) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k")
        runtime = Runtime(
            world.open(),
            model=settings,
            new_id=lambda: f"{prefix}-{next(ids)}",
            signer=signer,
            tools=[inventory],
        )
        session = runtime.start_session()
        session.run("How many apples?", timeout=60)
        session.run("Sure?", timeout=60)
        with session.subscribe() as feed:
            session.submit("Count again.")
            while isinstance(feed.get(timeout=60), Event):
                pass  # until the first streamed text: the task is running
        crash(runtime, session)
    return session.session_id


def _record_fork(store: EventStore, source: str, signer: Signer, name: str, resume: bool) -> str:
    """A fork of ``source`` at its first signed head, its copy signed at once (as ``plait
    fork`` with a signing key does), and, if ``resume``, resumed for one more task and closed:
    its copied heads sign its source's chain, its own its own (docs/event-log.md#signed-heads)."""
    first_head = next(e.seq for e in store.read(source) if isinstance(e.body, HeadSigned))
    forked = fork(store, source, first_head, new_session_id=name, signer=signer)
    if not resume:
        return forked
    with ScriptedModelServer([Step(text="Forked on.")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k")
        with Runtime(store, model=settings, signer=signer) as runtime:
            session = runtime.resume(forked)
            session.run("Go on.", timeout=60)
            session.close()
    return forked


def record_honest(world: World, mcp_url: str, rounds: int = 1) -> World:
    """Record ``rounds`` sessions of each kind (``functions``, ``mcp``, ``handoff``, ``fork``
    of the ``functions`` one and ``fork-unresumed``, ``crashed``) in ``world``'s store, signed
    with its key; return the world naming them (``kind-round``)."""
    signer = Signer.from_key_file(world.key)
    tools = {"t": McpServerConfig(url=mcp_url)}
    sessions: dict[str, str] = {}
    for n in range(1, rounds + 1):
        with world.store() as store:
            sessions[f"functions-{n}"] = record_inventory(store, f"fn{n}", signer)
            sessions[f"mcp-{n}"] = record_session(
                store,
                MCP,
                ["Use the tools.", "Once more."],
                f"mcp{n}",
                signer=signer,
                mcp_servers=tools,
            )
            sessions[f"handoff-{n}"] = record_session(
                store, HELPER_SCRIPT, ["How many?", "Sure?"], f"ho{n}", signer=signer
            )
            source = sessions[f"functions-{n}"]
            sessions[f"fork-{n}"] = _record_fork(store, source, signer, f"fk{n}-1", True)
            sessions[f"fork-unresumed-{n}"] = _record_fork(store, source, signer, f"fu{n}-1", False)
        sessions[f"crashed-{n}"] = _record_crashed(world, signer, f"cr{n}")
    return replace(world, sessions=sessions)


# --- a store with its keys ---------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    """One store (a SQLite file, or a schema of a PostgreSQL database) and the keys: ours,
    whose public key verifies, and the attacker's own."""

    backend: str
    """``sqlite`` or ``postgres``."""
    where: Path
    """A directory of its own: the SQLite file, the keys, the witness."""
    postgres: str = ""
    """The PostgreSQL server's URL (``postgres`` only)."""
    schema: str = ""
    """The store's schema there (``postgres`` only)."""
    sessions: dict[str, str] = field(default_factory=dict)
    """The honest sessions' ids, by ``kind-round``."""

    @classmethod
    def create(cls, backend: str, where: Path, postgres: str = "") -> World:
        """An empty store of ``backend`` in ``where`` (a new schema on ``postgres``), and two
        new keys."""
        where.mkdir(parents=True, exist_ok=True)
        generate_key(where / "audit.key")
        generate_key(where / "attacker.key")
        schema = f"plait_forged_{uuid.uuid4().hex[:12]}" if backend == "postgres" else ""
        return cls(backend, where, postgres, schema)

    @property
    def key(self) -> Path:
        """Our signing key (``plait keygen``): its public key is ``key.pub``."""
        return self.where / "audit.key"

    @property
    def public_key(self) -> PublicKey:
        return PublicKey.from_file(f"{self.key}.pub")

    @property
    def witness(self) -> Path:
        """The witness file of our key's signed heads."""
        return Path(f"{self.key}.heads")

    @property
    def url(self) -> str:
        """The store's URL, as ``plait --store`` and ``Runtime`` take it."""
        if self.backend == "sqlite":
            return str(self.where / "plait.db")
        return f"{self.postgres}?schema={self.schema}"

    def open(self) -> EventStore:
        return open_store(self.url)

    @contextmanager
    def store(self) -> Iterator[EventStore]:
        store = self.open()
        try:
            yield store
        finally:
            store.close()

    @contextmanager
    def insider(self) -> Iterator[Insider]:
        """Raw SQL on the store's tables."""
        if self.backend == "sqlite":
            with Insider.sqlite(self.where / "plait.db") as insider:
                yield insider
        else:
            with Insider.postgres(self.postgres, self.schema) as insider:
                yield insider

    def drop(self) -> None:
        """Drop the store's schema (``postgres``); the directory is the caller's."""
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(self.postgres, autocommit=True) as db:
                db.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


# --- the forgeries -----------------------------------------------------------------------------


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


def donor_for(world: World, session: str) -> str:
    """Another closed session of ``world`` (the same key's, not a fork) to take events from."""
    return next(
        s
        for name, s in world.sessions.items()
        if s != session and not name.startswith(("crashed", "fork"))
    )


class Attempt(NamedTuple):
    """One forgery of one session, and what verifying then said."""

    session: str
    outcome: Outcome
    """What verifying with the public key and the witness says of the forged session."""
    key_only: Outcome | None
    """What verifying with the public key alone says of it, for a forgery the key alone
    should catch (``None`` for those only the witness can)."""
    false_alarms: list[str]
    """The store's other sessions, untouched, that then failed to verify."""


class Lab:
    """A world's honest sessions, forged one forgery at a time: each is made through the
    insider, checked on one open store, then undone (the rows, the head rows and the witness
    put back as they were), so that every forgery starts from the honest store."""

    def __init__(self, world: World) -> None:
        self.world = world
        self._close = ExitStack()
        self.store = self._close.enter_context(world.store())
        self.insider = self._close.enter_context(world.insider())
        self.public_key = world.public_key
        self.attacker = AttackerKey(world.where / "attacker.key")
        self._rows = self.insider.save()
        self._witness = world.witness.read_bytes() if world.witness.exists() else None

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close.close()

    def check(self, session: str, *, witness: bool = True) -> Outcome:
        """What verifying ``session`` with the public key (and the witness) says."""
        lines = Witness(self.world.witness) if witness else None
        return check(self.store, session, self.public_key, lines)

    @contextmanager
    def forged(self, forgery: Forgery, session: str) -> Iterator[bool]:
        """Forge ``session`` for the block (yield whether the forgery applies to it)."""
        target = Target(
            self.insider,
            session,
            donor_for(self.world, session),
            self.attacker,
            self.public_key.fingerprint,
            self.world.witness,
        )
        try:
            yield forgery.forge(target)
        finally:
            self.insider.restore(self._rows)
            if self._witness is not None:
                self.world.witness.write_bytes(self._witness)

    def attempt(self, forgery: Forgery, session: str, *, others: bool = True) -> Attempt | None:
        """Forge ``session``, verify it and (with ``others``) every other session; ``None``
        if the forgery does not apply to it."""
        with self.forged(forgery, session) as applied:
            if not applied:
                return None
            outcome = self.check(session)
            key_only = None if forgery.needs_witness else self.check(session, witness=False)
            rest = [s for s in self.world.sessions.values() if s != session] if others else []
            alarms = [s for s in rest if not self.check(s).ok]
            return Attempt(session, outcome, key_only, alarms)
