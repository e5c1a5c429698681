"""Honest signed sessions in a store, and what a user checks of them (issue #33's audit).

``record_honest`` records, through the real runtime against ``ScriptedModelServer``, signed
sessions of each kind the audit must vouch for: function tool calls, MCP tool calls (a real MCP
server over streamable HTTP), a ``conv_create`` hand-off, forks (resumed, and not), and a
session cut by a crash after its second task's signed head, whose last events are unsigned.
``World`` is one store holding them (a SQLite file or a PostgreSQL schema) with the keys and
the witness. ``check`` is what a user runs: ``plait verify --public-key`` (which reads the
witness beside the key). ``Lab`` makes one forgery of ``forgeries.py`` at a time on a world's
store, checks it and every other session, and undoes it. ``tests/events/test_forgeries.py``
asserts that every forgery is detected and no untouched session is flagged;
``bench/adversarial.py`` counts both over more sessions.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from forgeries import Forgery, Target
from insider import AttackerKey, Insider
from scripted import (
    HELPER_SCRIPT,
    INVENTORY,
    call,
    crash,
    inventory,
    record_inventory,
    record_session,
)

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import Event, EventStore, HeadSigned, PublicKey, Signer, Witness, generate_key
from plait.events.stores import open_store
from plait.replay import fork
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

__all__ = ["Attempt", "Lab", "Outcome", "World", "check", "record_honest"]

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
            RuntimeSettings(
                model=settings,
                new_id=lambda: f"{prefix}-{next(ids)}",
                signer=signer,
                tools=[inventory],
            ),
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
        with Runtime(store, RuntimeSettings(model=settings, signer=signer)) as runtime:
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


# --- forging one session at a time ------------------------------------------------------------


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
