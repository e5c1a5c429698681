"""``kill -9`` one richer session at many points; each time the next process recovers it.

The child runs a scripted session on a SQLite file: streamed text with a tool batch (``bump``,
which counts its executions in a file and is not idempotent, then the read-only ``echo``),
then ``conv_create``, whose helper calls ``bump`` again, and the continuation. It is killed
with SIGKILL by the parent once an event is in the log, or kills itself from inside its store:
just after an append committed (durable, but no actor has applied it), or inside the
transaction of a group append, after its rows were inserted and before the commit.

The parent then checks what a user would: every acknowledged event is there unchanged, no seq
gap, the chain verifies, no half group; the task the crash cut off ended ``crashed`` with each
open call answered; ``bump`` ran at most once per started call; the session goes on, tasks
that waited first; and it replays across the crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from scripted import assert_histories_valid

from plait.actors import McpLimits, ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import Event, ToolCallCompleted, ToolCallRequested, ToolCallStarted, TurnAborted
from plait.events.projections import task_queue
from plait.events.stores import SqliteStore
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._recovery import NOT_SENT
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"
LIMITS = McpLimits(per_session=1)  # the child's, and the process that recovers it

CHILD = textwrap.dedent(
    """
    import itertools, json, os, signal, sys
    from plait.actors.mcp import McpServerConfig
    from plait.actors._model import ModelSettings
    from plait.actors._pool import McpLimits
    from plait.events.stores._sqlite import SqliteStore
    from plait.events._packing import decompressed
    import msgspec
    from plait.runtime import Runtime, RuntimeSettings
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])
    db, server_py, counter, witness, point = sys.argv[1:6]
    point = json.loads(point)
    how, kind, nth = point["how"], point["kind"], point["nth"]


    class Doomed:
        '''The store's connection: dies at the COMMIT of an armed transaction.'''

        def __init__(self, db):
            self.db, self.armed = db, None

        def execute(self, sql, *args):
            if sql == "COMMIT" and self.armed is not None:
                stream, head_seq = self.armed  # what the transaction inserted, uncommitted
                query = (
                    "SELECT a.seq, a.count, a.data FROM appends AS a "
                    "JOIN names AS n ON n.key = a.stream WHERE n.name = ? ORDER BY a.seq"
                )
                found = []  # each event's seq and type, as its entry says it
                for last, count, data in self.db.execute(query, (stream,)).fetchall():
                    plain = b"\\xdd" + count.to_bytes(4, "big") + decompressed(data)
                    for i, entry in enumerate(RAWS.decode(plain)):
                        kind = msgspec.msgpack.decode(entry)[3]["type"]
                        found.append((last - count + 1 + i, kind))
                die([(seq, kind) for seq, kind in found if seq > head_seq])
            return self.db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.db, name)


    class CrashingStore(SqliteStore):
        '''Dies with SIGKILL at the nth event of type `kind` it writes: after the append
        committed ("after-append"), or inside its transaction ("mid-append").'''

        def __init__(self, path):
            super().__init__(path)
            self._link.db = self._writes._db = Doomed(self._link.db)
            self.seen = 0
            self.acknowledged = []

        def reached(self, kinds):
            self.seen += sum(1 for k in kinds if k == kind)
            return self.seen >= nth

        def append(self, stream, events, expected_seq, *, epoch=None):
            return self.written(super().append(stream, events, expected_seq, epoch=epoch))

        def append_prepared(self, stream, prepared, *, epoch=None):  # a group made ahead
            return self.written(super().append_prepared(stream, prepared, epoch=epoch))

        def written(self, out):
            self.acknowledged += [[e.seq, e.hash.hex()] for e in out]
            if how == "after-append" and self.reached(type(e.body).__name__ for e in out):
                die([])
            return out

        def _append_rows(self, stream, expected_seq, prepare, epoch):
            def watched(head_seq, head_hash):
                prepared = prepare(head_seq, head_hash)
                if how == "mid-append" and self.reached(row[1] for row in prepared.rows):
                    self._link.db.armed = (stream, head_seq)
                return prepared

            return super()._append_rows(stream, expected_seq, watched, epoch)


    def die(uncommitted):
        with open(witness, "w") as file:
            json.dump({"acknowledged": store.acknowledged, "uncommitted": uncommitted}, file)
        os.kill(os.getpid(), signal.SIGKILL)


    def call(name, **arguments):
        return ScriptedToolCall(name, json.dumps(arguments))


    slow = {"chunk_chars": 1, "chunk_delay": 0.05}  # still streaming when the parent kills
    script = [
        Step(text="counting", tool_calls=[call("t__bump"), call("t__echo", text="hi")]),
        Step(tool_calls=[call("conv_create", user_instruction="count once more")]),
        Step(text="helping", tool_calls=[call("t__bump", hold=point["hold"])]),  # the helper's
        Step(text="helped"),
        Step(text="done " * 40, **slow) if point["slow_end"] else Step(text="done"),
    ]
    ids = itertools.count(1)
    env = {"PLAIT_TEST_COUNTER": counter}
    mcp = {"t": McpServerConfig(command=sys.executable, args=[server_py, "stdio"], env=env)}
    store = CrashingStore(db)
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
        runtime = Runtime(
            store,
            RuntimeSettings(
                model=settings, mcp_servers=mcp, mcp_limits=McpLimits(per_session=1),
                new_id=lambda: f"id-{next(ids)}", lease_sec=1.0,  # it dies: its lease lapses soon
            ),
        )
        session = runtime.start_session()
        session.run("work", timeout=120)
    sys.exit("the session ended without reaching its kill point")
    """
)


class KillPoint(msgspec.Struct, frozen=True):
    """Where the child dies, and how."""

    how: str
    """``parent`` (SIGKILL from the parent), ``after-append`` or ``mid-append`` (by itself)."""
    kind: str
    """The event type that marks the point."""
    nth: int = 1
    """Which occurrence of it in the session, counting from 1."""
    hold: float = 0.0
    """Seconds the helper's ``bump`` waits after counting (to be killed in it)."""
    slow_end: bool = False
    """Whether the continuation's final reply streams slowly (to be killed in it)."""
    executions: int | None = None
    """How many times ``bump`` ran, where the point decides it (``None``: a race decides)."""


# The session, one group per line (``|`` marks the transactions of one line):
#   SessionStarted ConversationOpened | TaskEnqueued TaskStarted | McpServerReady
#   TurnStarted ModelRequested | ModelResponded TokensCounted ToolCallRequested x2 (bump, echo)
#   ToolCallStarted(bump) | ToolCallCompleted(bump) | ToolCallStarted(echo) | ...Completed(echo)
#   TurnStarted ModelRequested | ModelResponded TokensCounted ToolCallRequested(conv_create)
#   ConversationOpened(helper) | TurnAborted(replaced) TaskEnqueued x2 | TaskStarted(helper)
#   the helper's turns, with ToolCallStarted(bump) and ...Completed(bump) | TaskCompleted
#   TaskStarted(continuation) ToolCallCompleted(conv_create) | its turn | TaskCompleted
POINTS = {
    # The parent kills the child while it waits on something outside it.
    "in-the-helper-bump": KillPoint("parent", "ToolCallStarted", 3, hold=60),
    "in-the-continuation-stream": KillPoint(
        "parent", "ModelRequested", 5, slow_end=True, executions=2
    ),
    # The child kills itself once the event is durable, before any actor applied it.
    "after-bump-started": KillPoint("after-append", "ToolCallStarted", 1, executions=0),
    "after-bump-completed": KillPoint("after-append", "ToolCallCompleted", 1, executions=1),
    "after-turn-replaced": KillPoint("after-append", "TurnAborted", 1, executions=1),
    "after-continuation-started": KillPoint("after-append", "TaskStarted", 3, executions=2),
    # ... or inside the transaction of the reply with its calls, its rows inserted.
    "mid-reply-with-calls": KillPoint("mid-append", "ToolCallRequested", 1, executions=0),
}


class Crash(msgspec.Struct):
    """What the parent knows of the killed child."""

    db: Path
    """The session's store."""
    counter: Path
    """``bump``'s counter file: one line per execution."""
    acknowledged: list[tuple[int, bytes]]
    """``(seq, hash)`` of every event the child's appends returned (or the parent saw)."""
    uncommitted: list[tuple[int, str]]
    """``(seq, type)`` of the rows a ``mid-append`` kill left in its transaction."""


def mcp_servers(counter: Path) -> dict[str, McpServerConfig]:
    env = {"PLAIT_TEST_COUNTER": str(counter)}
    return {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"], env=env)}


def crash(tmp_path: Path, point: KillPoint) -> Crash:
    """Run the child until it dies at ``point``, killed by us or by itself."""
    db, counter, witness = tmp_path / "crash.db", tmp_path / "bumps", tmp_path / "witness.json"
    SqliteStore(db).close()
    counter.touch()
    argv = [str(db), str(SERVER), str(counter), str(witness), msgspec.json.encode(point).decode()]
    child = subprocess.Popen([sys.executable, "-c", CHILD, *argv], start_new_session=True)
    acknowledged: list[tuple[int, bytes]] = []
    try:
        if point.how == "parent":
            with SqliteStore(db) as store, store.subscribe() as tail:
                count = 0
                while count < point.nth and (event := tail.get(timeout=60)) is not None:
                    acknowledged.append((event.seq, event.hash))
                    count += type(event.body).__name__ == point.kind
                assert count == point.nth, "the child never reached the point to kill it at"
        else:
            child.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the child and its MCP server, at once
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, f"the child exited with {child.returncode}"
    uncommitted: list[tuple[int, str]] = []
    if point.how != "parent":
        said = json.loads(witness.read_text())
        acknowledged = [(seq, bytes.fromhex(digest)) for seq, digest in said["acknowledged"]]
        uncommitted = [(seq, kind) for seq, kind in said["uncommitted"]]
    return Crash(db, counter, acknowledged, uncommitted)


def named(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if type(e.body).__name__ == kind]


@pytest.mark.parametrize("name", list(POINTS))
def test_a_session_killed_at_any_point_is_recovered(tmp_path: Path, name: str) -> None:
    point = POINTS[name]
    crashed = crash(tmp_path, point)
    with SqliteStore(crashed.db) as store:
        before = store.read("id-1")
        assert store.verify("id-1").ok
        assert [e.seq for e in before] == list(range(1, len(before) + 1))
        # Nothing acknowledged is lost or changed, nothing else was kept: no half group.
        kept = [(e.seq, e.hash) for e in before]
        assert kept[: len(crashed.acknowledged)] == crashed.acknowledged
        if point.how != "parent":
            assert kept == crashed.acknowledged
        if point.how == "mid-append":
            assert len(crashed.uncommitted) > 1  # a group: inserted, then the kill
            assert crashed.uncommitted[0][0] == len(before) + 1
            assert point.kind in [kind for _, kind in crashed.uncommitted]
        assert len(named(before, point.kind)) == point.nth - (point.how == "mid-append")
        state = task_queue(before)
        waiting = len(state.pending)  # they run before the new task
        replies = [Step(text=f"reply {i}") for i in range(1, waiting + 2)]
        with ScriptedModelServer(replies) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model="m")
            servers = mcp_servers(crashed.counter)
            with Runtime(
                store, RuntimeSettings(model=settings, mcp_servers=servers, mcp_limits=LIMITS)
            ) as runtime:
                outcome = runtime.resume("id-1").run("are you there?", timeout=60)
        events = store.read("id-1")
        assert store.verify("id-1").ok
    assert outcome.ok and outcome.last_assistant_message == f"reply {waiting + 1}"
    recovered = events[len(before) :]
    assert len(named(recovered, "TaskCompleted")) == waiting + 1
    # The task the crash cut off (and only it) ended crashed; no call that may have run is
    # said not to have, and every call is answered, once.
    crashes = [
        e.task_id
        for e in recovered
        if isinstance(e.body, TurnAborted) and e.body.reason == "crashed"
    ]
    assert crashes == ([state.running.task_id] if state.running else [])
    requested = {e.body.call_id: e.body for e in events if isinstance(e.body, ToolCallRequested)}
    started = {e.body.call_id for e in events if isinstance(e.body, ToolCallStarted)}
    for event in recovered:
        if isinstance(event.body, ToolCallCompleted) and event.body.call_id in started:
            assert event.body.output != NOT_SENT
    completed = [e.body.call_id for e in events if isinstance(e.body, ToolCallCompleted)]
    assert sorted(completed) == sorted(requested)  # every call answered, once
    assert_histories_valid(events)
    # bump ran at most once per call sent to it, and never again after the crash.
    bumps = [c for c, body in requested.items() if body.tool == "t__bump" and c in started]
    outcomes = [
        e.body.outcome
        for e in events
        if isinstance(e.body, ToolCallCompleted) and e.body.call_id in bumps
    ]
    executions = len(crashed.counter.read_text().splitlines())
    assert outcomes.count("ok") <= executions <= outcomes.count("ok") + outcomes.count("unknown")
    assert executions <= len(bumps)
    if point.executions is not None:
        assert executions == point.executions
    with SqliteStore(crashed.db) as store:  # and the session replays, across its crash
        result = replay(store, "id-1", timeout=5)
        assert result.ok, result.divergence and result.divergence.message()
