"""Record the replay golden sessions: ``python tests/replay/golden/make_golden.py NAME``.

Each run records real sessions (a scripted model, the test MCP server) into ``NAME.sqlite``
and lists them in ``NAME.json`` with what each covers. Commit both and never rewrite them:
``test_golden_replay.py`` replays them forever, so a change to the program that would replay
an old session differently is caught. ``NAME.json`` also names one deliberately changed
program (a smaller interrupt depth limit) and the seq where its replay must diverge.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[2]))  # the tests' support modules

from scripted import call, record_session

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import Event, TaskCompleted, TurnAborted
from plait.events.stores import SqliteStore
from plait.replay import replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

HERE = Path(__file__).parent
SERVER = HERE.parents[1] / "mcp" / "server.py"


def chains() -> tuple[list[Step], list[str]]:
    """Nested interrupts: create, create inside it, send back, conv_list and history."""
    return [
        Step(tool_calls=[call("conv_create", user_instruction="plan the release")]),
        Step(tool_calls=[call("conv_create", user_instruction="check the changelog")]),
        Step(text="the changelog is complete"),
        Step(tool_calls=[call("conv_list"), call("conv_history", conversation_id="g1-4")]),
        Step(text="plan: tag, build, publish"),
        Step(text="the helper planned it"),
        Step(tool_calls=[call("conv_send", conversation_id="g1-4", text="and the date?")]),
        Step(text="Friday"),
        Step(text="Friday it is"),
    ], ["release plan", "pick a date"]


def tools() -> tuple[list[Step], list[str]]:
    """MCP calls: read-only in parallel, then a writing one, an invalid one, an unknown one."""
    meet = call("t__rendezvous", count=2)
    return [
        Step(tool_calls=[meet, meet]),
        Step(tool_calls=[call("t__echo", text="a"), call("t__note", key="k", text="v")]),
        Step(tool_calls=[call("t__add", a="one", b=2), call("t__invented")]),
        Step(text="tools done"),
    ], ["use the tools"]


def failures() -> tuple[list[Step], list[str]]:
    """A retried 500, a failed task (3 failures), then a good one."""
    return [
        Step(status=500),
        Step(text="after one retry"),
        Step(status=503),
        Step(status=500),
        Step(status=500),
        Step(text="recovered"),
    ], ["first", "second", "third"]


def servers() -> tuple[list[Step], list[str]]:
    """A strict server that sends no usage: reasoning beside a tool call, the answer, a reply
    cut at the output cap, a model error, then a good answer."""
    return [
        Step(reasoning="look first", tool_calls=[call("conv_list")]),
        Step(text="none open"),
        Step(text="a very long answer " * 10),
        Step(status=401, error_message="bad key"),
        Step(text="back"),
    ], ["list them", "tell me everything", "again", "and now"]


SERVER_QUIRKS = frozenset({"strict_null_content", "no_usage", "object_arguments"})


def record(
    store: SqliteStore, name: str, make: Any, quirks: frozenset[str] = frozenset(), **runtime: Any
) -> str:
    script, prompts = make()
    settings: dict[str, Any] = {"api_key": "golden", "backoff_sec": 0.01}
    if quirks:
        settings["max_output_tokens"] = 8
    return record_session(store, script, prompts, name, settings, quirks, **runtime)


def interrupted(store: SqliteStore) -> str:
    """A user interrupt mid-stream, then a destroy by the embedder."""
    ids = itertools.count(1)
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="draft it")]),
        Step(text="drafted"),
        Step(text="done"),
        Step(text="a long answer that will be cut", chunk_chars=2, chunk_delay=0.05),
    ]
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="golden")
        with Runtime(
            store, RuntimeSettings(model=settings, new_id=lambda: f"g4-{next(ids)}")
        ) as rt:
            session = rt.start_session()
            session.run("delegate", timeout=60)
            with session.subscribe() as feed:
                session.submit("talk")
                while (item := feed.get(timeout=30)) is not None:
                    if not isinstance(item, Event):
                        session.interrupt()
                    elif isinstance(item.body, TurnAborted):
                        break
            session.destroy("g4-4")
            session.close()
    return session.session_id


def taken_over(store: SqliteStore) -> str:
    """A process stopped mid-stream with a task waiting; another takes the session over (its
    ``SessionResumed``, the cut-off task ended ``crash``, the waiting task run); then a close
    interrupts a task (cause ``close``)."""
    ids = itertools.count(1)
    script = [
        Step(text="cut off by the stop " * 20, chunk_chars=2, chunk_delay=0.05),
        Step(text="run after the takeover"),
        Step(text="cut off by the close " * 20, chunk_chars=2, chunk_delay=0.05),
    ]
    with ScriptedModelServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="golden")
        first = Runtime(store, RuntimeSettings(model=settings, new_id=lambda: f"g6-{next(ids)}"))
        session = first.start_session()
        with session.subscribe() as feed:
            session.submit("start")
            session.submit("then this")  # waits, and runs once the session is taken over
            while isinstance(feed.get(timeout=30), Event):
                pass  # until the first streamed text
        # the process stops: nothing more is recorded
        session.runtime.sessions.hosts[session.session_id].crash(timeout=5)
        first._loop.close()
        tail = store.subscribe(store.read(session.session_id)[-1].position)
        with Runtime(
            store, RuntimeSettings(model=settings, new_id=lambda: f"g6-{next(ids)}")
        ) as second:
            [recovered] = second.recover()
            assert recovered.crashed_task is not None and recovered.waiting == 1
            while (event := tail.get(timeout=30)) is not None:
                if isinstance(event.body, TaskCompleted):
                    break
            tail.close()
            resumed = second.resume(session.session_id)
            with resumed.subscribe() as feed:
                resumed.submit("talk")
                while isinstance(feed.get(timeout=30), Event):
                    pass
            resumed.close()
    return session.session_id


def main(name: str) -> None:
    db = HERE / f"{name}.sqlite"
    if db.exists():
        sys.exit(f"{db} exists: golden logs are never rewritten")
    mcp = {"t": McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])}
    with SqliteStore(db) as store:
        sessions = {
            record(store, "g1", chains): "nested conv_create, conv_send, conv_list, conv_history",
            record(store, "g2", tools, mcp_servers=mcp): "MCP calls: parallel, serial, refused",
            record(store, "g3", failures): "model errors: retried, failed task, recovery",
            interrupted(store): "a user interrupt mid-stream, a destroy by the embedder",
        }
        if name != "v1-sessions":  # recorded since the model protocol was versioned
            session = record(store, "g5", servers, SERVER_QUIRKS)
            sessions[session] = (
                "model protocol 1 against a strict server without usage: reasoning, a tool "
                "call, a reply cut at the cap, a model error"
            )
        if name not in ("v1-sessions", "v2-sessions"):  # recorded since causes and takeovers
            sessions[taken_over(store)] = (
                "a process stopped mid-stream, taken over by another (SessionResumed, a crashed "
                "task, a waiting one run), then a close that interrupts a task"
            )
        for session in sessions:
            result = replay(store, session)
            assert result.ok, result.divergence and result.divergence.message()
        changed = replay(store, "g1-1", max_interrupt_chain_depth=1)
        assert changed.divergence is not None
        store._link.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for extra in ("-wal", "-shm"):
        db.with_name(db.name + extra).unlink(missing_ok=True)
    manifest = {
        "sessions": sessions,
        "changed_program": {
            "session": "g1-1",
            "max_interrupt_chain_depth": 1,
            "diverges_at_seq": changed.divergence.seq,
            "expected": changed.divergence.expected.split()[0],
            "got": changed.divergence.got.split()[0],
        },
    }
    (HERE / f"{name}.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
