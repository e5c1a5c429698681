"""Test support for the runtime: a runtime on a scripted model, and checks on its events."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chat_rules import chat_messages, chat_problems, responses_problems

from plait import ApprovalDecision, ApprovalRequest
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ConversationDestroyed,
    ConversationOpened,
    Event,
    EventStore,
    McpServerFailed,
    McpServerReady,
    McpServersOffered,
    McpToolsRefreshed,
    McpToolWithheld,
    SessionClosed,
    SessionStarted,
    Signer,
    ToolCallCompleted,
)
from plait.events.projections import HistoryProjection
from plait.replay import audit, replay
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

TEST_SERVER_PY = Path(__file__).parent / "mcp" / "server.py"
"""The repository's test MCP server (see its docstring for its tools)."""


def local_mcp_servers(*args: str) -> dict[str, McpServerConfig]:
    """The test MCP server over stdio as server ``t`` (its tools are ``t__echo``...); ``args``
    go on its command line (``--variant control``...)."""
    command = [str(TEST_SERVER_PY), "stdio", *args]
    return {"t": McpServerConfig(command=sys.executable, args=command)}


class HttpServer:
    """The test server over streamable HTTP on a free loopback port, in a child process."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(TEST_SERVER_PY), "http", "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        # It prints its URL once its socket listens: wait for that line, not for a while.
        readable, _, _ = select.select([self.process.stdout], [], [], 20.0)
        assert readable, "the HTTP test server did not start in 20 s"
        line = self.process.stdout.readline()
        assert line.startswith("listening on "), line
        self.url = line.split()[-1]

    def close(self) -> None:
        """Stop the server."""
        self.process.terminate()
        self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


class Stuck:
    """An async approver that never decides; it says when it is asked and when cancelled."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.cancelled = threading.Event()

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


def runtime_for(
    server: ScriptedModelServer,
    tmp_path: Path,
    options: dict[str, Any] | None = None,
    store: EventStore | None = None,
    **kwargs: Any,
) -> Runtime:
    """A runtime on ``store`` (by default the SQLite file ``tmp_path/plait.db``) and
    ``server``; ``options`` are more ``ModelSettings`` fields, ``kwargs`` the ``Runtime``'s."""
    settings = ModelSettings(
        base_url=server.base_url,
        api_key="test",
        model="scripted-model",
        backoff_sec=0.01,
        **(options or {}),
    )
    where = tmp_path / "plait.db" if store is None else store
    return Runtime(where, RuntimeSettings(model=settings, workdir=tmp_path, **kwargs))


def crash(runtime: Runtime, session: Any) -> None:
    """Stop ``runtime`` as a killed process stops: ``session`` records nothing more and its
    lease is left lapsed; its connections to the model server close and its heartbeat and
    inbox threads stop, as a dead process's do (left running on the closed store, the inbox
    thread of a PostgreSQL store spun, a core's worth of CPU for the rest of the run)."""
    session.runtime.sessions.hosts[session.session_id].crash(timeout=5)
    runtime.timers.close(5)
    runtime.owner.close()
    runtime._loop.submit(runtime._client.aclose()).result(5)
    runtime._loop.close()
    runtime.store.close()


def replayed(tmp_path: Path, session_id: str) -> list[Event]:
    """Replay a session of ``tmp_path/plait.db``, assert it is clean and its histories
    valid, and return its log."""
    from plait.events import SqliteStore
    from plait.replay import replay

    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session_id, timeout=5)
        assert result.ok, result.divergence and result.divergence.message()
        events = store.read(session_id)
    assert_histories_valid(events)
    return events


def one_mcp_call(
    tmp_path: Path, config: McpServerConfig, script: list[Step], timeout: float = 60.0
) -> tuple[str | None, ToolCallCompleted]:
    """Run ``script`` in a session whose one MCP server, ``raw``, is ``config``; return the
    session's answer and its one tool call's recorded end (the session replayed clean)."""
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, mcp_servers={"raw": config}) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("go", timeout=timeout)
        session.close()
    events = replayed(tmp_path, session.session_id)
    [completed] = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    return outcome.last_assistant_message, completed


def record_session(
    store: EventStore,
    script: list[Step],
    prompts: list[str],
    prefix: str,
    settings: dict[str, Any] | None = None,
    quirks: frozenset[str] = frozenset(),
    **runtime: Any,
) -> str:
    """Run ``prompts`` in one new session against ``script``, close it, return its id.

    Ids are ``prefix-1``, ``prefix-2``...; ``settings`` are ``ModelSettings`` fields; ``quirks``
    the server's.
    """
    ids = itertools.count(1)
    with ScriptedModelServer(script, quirks=quirks) as server:
        fields = {"base_url": server.base_url, "api_key": "test", **(settings or {})}
        model = ModelSettings(**fields)
        with Runtime(
            store, RuntimeSettings(model=model, new_id=lambda: f"{prefix}-{next(ids)}", **runtime)
        ) as rt:
            session = rt.start_session()
            for prompt in prompts:
                session.run(prompt, timeout=60)
            session.close()
    return session.session_id


def kinds(events: list[Event], conversation: str) -> list[str]:
    return [type(e.body).__name__ for e in events if e.conversation_id == conversation]


def call(name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(name, json.dumps(arguments))


HELPER_SCRIPT = [
    Step(text="Asking a helper.", tool_calls=[call("conv_create", user_instruction="Count.")]),
    Step(text="There are two."),
    Step(text="The helper says two."),
    Step(text="Still two."),
]
"""The root hands work to a helper conversation, which answers; then a second task."""


INVENTORY = [
    Step(text="Looking.", tool_calls=[call("inventory", item="apples")]),
    Step(text="There are 3 apples."),
    Step(text="Still 3."),
]
"""Two tasks: the first calls a function tool, ``inventory``, whose output a forger changes."""


def inventory(item: str) -> str:
    """Count an item in stock."""
    return f"3 {item}"


def record_inventory(
    store: EventStore,
    prefix: str,
    signer: Signer | None,
    tool: Callable[[str], str] = inventory,
) -> str:
    """A closed session of ``INVENTORY`` (two tasks and the close), written with ``signer``;
    ``tool`` answers its call (a function named ``inventory``)."""
    prompts = ["How many apples?", "Sure?"]
    return record_session(store, INVENTORY, prompts, prefix, tools=[tool], signer=signer)


def assert_histories_valid(events: list[Event]) -> None:
    state = HistoryProjection().fold(events)
    assert state.anomalies == []
    for conv in state.conversations.values():
        open_calls: list[str] = []
        for message in conv.messages:
            if message.role == "tool":
                open_calls.remove(message.tool_call_id or "")
            else:
                assert open_calls == []
                open_calls = [c.id for c in message.tool_calls or ()]


# --- random sessions ---------------------------------------------------------------------------

TOOLS = ["conv_list", "conv_history", "conv_create", "conv_send", "conv_destroy", "web_search"]


def random_call(rng: random.Random) -> ScriptedToolCall:
    name = rng.choice(TOOLS)
    target = f"id-{rng.randint(1, 40)}"  # ids are counted, so some of these exist
    arguments: dict[str, Any] = {
        "conv_create": {"user_instruction": "help with part of it"},
        "conv_send": {"conversation_id": target, "text": "and this?"},
        "conv_history": {"conversation_id": target, "limit": rng.randint(1, 3)},
        "conv_destroy": {"conversation_id": target},
    }.get(name, {})
    text = json.dumps(arguments) if rng.random() > 0.1 else "{not json"
    return ScriptedToolCall(rng.choice([name, name.replace("_", ".", 1)]), text)


def random_script(rng: random.Random) -> list[Step]:
    steps = []
    for _ in range(rng.randint(1, 9)):
        calls = [random_call(rng) for _ in range(rng.randint(1, 2))] if rng.random() < 0.55 else []
        status = 500 if rng.random() < 0.05 else None
        steps.append(
            Step(text=rng.choice(["", "ok", "thinking it over"]), tool_calls=calls, status=status)
        )
    return steps


SESSION_WIDE = (
    SessionStarted,
    SessionClosed,
    McpServerReady,
    McpServerFailed,
    McpToolsRefreshed,
    McpToolWithheld,
    McpServersOffered,
)
"""Events of the session as a whole: no conversation, no task."""
LIFECYCLE = (ConversationOpened, ConversationDestroyed)
"""A conversation's own lifecycle: its id, and no task (it is not a task's doing)."""


def assert_ids(events: list[Event]) -> None:
    """Every event names its conversation and task, where it has them."""
    for event in events:
        name = f"seq {event.seq} {type(event.body).__name__}"
        if isinstance(event.body, SESSION_WIDE):
            assert event.conversation_id is None and event.task_id is None, name
        else:
            assert event.conversation_id is not None, f"{name}: no conversation_id"
            if not isinstance(event.body, LIFECYCLE):
                assert event.task_id is not None, f"{name}: no task_id"


def went_on_problems(store: EventStore, session_id: str, requests: list[Any]) -> list[str]:
    """What is wrong with a session that went on (a fork, a recovered session), one line
    each: a model request a strict server refuses (``chat_rules``), a call still pending in
    its audit, a hash chain that does not verify, a replay that diverges."""
    problems = [p for request in requests for p in chat_problems(chat_messages(request))]
    problems += [p for request in requests for p in responses_problems(request)]
    rows = audit(store, session_id)
    problems += [f"{row.call_id} pending in the audit" for row in rows if row.outcome == "pending"]
    if not store.verify(session_id).ok:
        problems.append("its hash chain does not verify")
    result = replay(store, session_id, timeout=5)
    if result.divergence is not None:
        problems.append(result.divergence.message())
    return problems
