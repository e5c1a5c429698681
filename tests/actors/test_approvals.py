"""Approvals of MCP tool calls: which calls a policy asks for, who decides, remembered keys and
their expiry, and failing closed. A real test MCP server over streamable HTTP, one for the
module, a scripted model over HTTP, and approvers written as an embedder writes them."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from scripted import Stuck, assert_histories_valid, call, crash, runtime_for
from support import TickClock

from plait import ApprovalDecision, ApprovalRequest, ConfigError
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ApprovalKeyExpired,
    ApprovalPolicyNarrowed,
    CommandKey,
    Event,
    SessionResumed,
    SqliteStore,
    TaskCompleted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallCompleted,
    ToolCallStarted,
    TurnAborted,
)
from plait.events.projections import ApprovalState, canonical_arguments
from plait.replay import audit, replay
from plait.runtime import Runtime, RuntimeSettings, SessionHandle
from plait.runtime._recovery import UNAPPROVED
from plait.testing import ScriptedModelServer, Step

Servers = dict[str, McpServerConfig]


@pytest.fixture(scope="module")
def tools(mcp_url: str) -> Servers:
    """The test server as ``t``: ``t__echo`` read-only, ``t__note`` writes (``destructiveHint:
    false``), ``t__fail`` has no annotations (so, by MCP's defaults, may be destructive).
    The module's tests share it: what they prove does not depend on the transport or on the
    server's state (only ``note`` keeps any, and no test reads it back)."""
    return {"t": McpServerConfig(url=mcp_url)}


class Approver:
    """An embedder's approver: records what it was asked, answers by ``rule``."""

    def __init__(self, rule: Callable[[ApprovalRequest], ApprovalDecision] | None = None) -> None:
        self.rule = rule or (lambda request: ApprovalDecision(approved=True))
        self.asked: list[ApprovalRequest] = []
        self.threads: list[str] = []

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        self.threads.append(threading.current_thread().name)
        return self.rule(request)

    @property
    def tools(self) -> list[str]:
        return [request.tool for request in self.asked]


class AsyncApprover(Approver):
    """The same, as a coroutine function (run on the runtime's effect loop)."""

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().__call__(request)


def runtime(server: ScriptedModelServer, tmp_path: Path, tools: Servers, **kwargs: Any) -> Runtime:
    ids = itertools.count(1)  # the session is id-1, its root conversation id-2
    return runtime_for(
        server, tmp_path, mcp_servers=tools, new_id=lambda: f"id-{next(ids)}", **kwargs
    )


def bodies(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e.body for e in events if isinstance(e.body, kind)]


def decisions(events: list[Event]) -> list[tuple[str, bool, str]]:
    """(tool call id, approved, decided_by) of every decision, in order."""
    return [(d.call_id, d.approved, d.decided_by) for d in bodies(events, ToolApprovalDecided)]


def wait_for(feed: Iterator[Any], kind: type[Any]) -> Event:
    for item in feed:
        if isinstance(item, Event) and isinstance(item.body, kind):
            return item
    raise AssertionError(f"the feed ended before a {kind.__name__}")


MIXED = [
    call("t__echo", text="hi"),
    call("t__note", key="k", text="v"),
    call("t__fail", message="no"),
    call("conv_list"),
]


@pytest.mark.parametrize(
    ("policy", "asked"),
    [
        ("never", []),
        ("on-request", ["t__fail"]),
        ("on-write", ["t__note", "t__fail"]),
        ("untrusted", ["t__echo", "t__note", "t__fail"]),
    ],
)
def test_each_policy_asks_for_exactly_its_calls(
    tmp_path: Path, tools: Servers, policy: str, asked: list[str]
) -> None:
    approver = Approver()
    script = [Step(tool_calls=MIXED), Step(text="done")]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approval_policy=policy, approver=approver) as rt,
    ):
        session = rt.start_session()
        assert session.run("go", timeout=60).ok
        events = rt.store.read(session.session_id)
    assert approver.tools == asked
    assert [r.tool for r in bodies(events, ToolApprovalRequested)] == asked
    assert [c.outcome for c in bodies(events, ToolCallCompleted)] == ["ok", "ok", "error", "ok"]
    with SqliteStore(tmp_path / "plait.db") as store:
        rows = audit(store, session.session_id)
    shown = [(r.tool, r.approval, r.decided_by) for r in rows]
    assert shown == [
        (tool, "approved", "approver") if tool in asked else (tool, "not required", None)
        for tool in ["t__echo", "t__note", "t__fail", "conv_list"]
    ]
    started = [e.seq for e in events if isinstance(e.body, ToolCallStarted)]
    decided = [e.seq for e in events if isinstance(e.body, ToolApprovalDecided)]
    assert all(any(d < s for s in started) for d in decided)  # decided before it runs
    assert_histories_valid(events)


@pytest.mark.parametrize("kind", [Approver, AsyncApprover])
def test_a_denied_call_is_refused_and_the_model_is_told_who_denied_it(
    tmp_path: Path, tools: Servers, kind: type[Approver]
) -> None:
    approver = kind(
        lambda r: ApprovalDecision(approved='"k2"' not in r.arguments, reason="not that one")
    )
    notes = [call("t__note", key="k1", text="a"), call("t__note", key="k2", text="b")]
    script = [Step(tool_calls=notes), Step(text="one of two")]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approval_policy="on-write", approver=approver) as rt,
    ):
        session = rt.start_session()
        outcome = session.run("write both", timeout=60)
        events = rt.store.read(session.session_id)
    assert outcome.last_assistant_message == "one of two"  # the turn went on
    first, second = bodies(events, ToolCallCompleted)
    assert (first.outcome, first.output) == ("ok", "noted k1")
    denied = "not run: denied by approver: not that one"
    assert (second.outcome, second.output) == ("refused", denied)
    assert server.requests[1].messages[-1]["content"] == denied  # what the model saw
    assert decisions(events) == [("call_1", True, "approver"), ("call_2", False, "approver")]
    assert len(bodies(events, ToolCallStarted)) == 1  # the denied call never reached its server
    request = approver.asked[0]
    assert (request.session_id, request.conversation_id) == ("id-1", "id-2")
    assert (request.tool, request.policy) == ("t__note", "on-write")
    assert request.reason == "policy 'on-write': t__note is not read-only"
    # Off the actor threads: a coroutine on the effect loop, a function in a worker thread.
    on_loop = kind is AsyncApprover
    assert all((name == "plait-effects") == on_loop for name in approver.threads)
    assert_histories_valid(events)


def test_a_conversation_only_narrows_the_sessions_policy(tmp_path: Path, tools: Servers) -> None:
    approver = Approver()
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="wait for work")]),
        Step(text="ready"),  # the child's first task
        Step(text="delegated"),  # the root goes on
        Step(tool_calls=[call("t__echo", text="child")]),  # the child, untrusted: asks
        Step(text="child echoed"),
        Step(tool_calls=[call("t__echo", text="root"), call("t__fail", message="x")]),
        Step(text="root done"),  # the root: its "never" was narrowed to "on-request"
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approver=approver) as rt,
    ):
        session = rt.start_session(approval_policy="on-request")
        assert session.run("delegate", timeout=60).ok
        child = next(c.id for c in session.conversations() if c.id != "id-2")
        session.change_context(child, approval_policy="untrusted")
        session.change_context(approval_policy="never")
        assert session.run("echo", conversation_id=child, timeout=60).ok
        assert session.run("echo and fail", timeout=60).ok
        events = rt.store.read(session.session_id)
    assert [(r.conversation_id, r.tool) for r in approver.asked] == [
        (child, "t__echo"),
        ("id-2", "t__fail"),
    ]
    [narrowed] = [e for e in events if isinstance(e.body, ApprovalPolicyNarrowed)]
    assert narrowed.conversation_id == "id-2"
    assert (narrowed.body.requested, narrowed.body.effective) == ("never", "on-request")
    assert approver.asked[1].policy == "on-request"
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session.session_id, timeout=10)
        assert result.ok, result.divergence and result.divergence.message()


def test_a_childs_policy_is_its_parents_at_the_time_it_is_created(
    tmp_path: Path, tools: Servers
) -> None:
    approver = Approver()
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="echo")]),
        Step(tool_calls=[call("t__echo", text="child")]),  # the child inherited "untrusted"
        Step(text="child done"),
        Step(text="root done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approver=approver) as rt,
    ):
        session = rt.start_session()
        session.change_context(approval_policy="untrusted")
        assert session.run("delegate", timeout=60).ok
    assert approver.tools == ["t__echo"]


def test_session_keys_hold_everywhere_and_conversation_keys_only_where_given(
    tmp_path: Path,
    tools: Servers,
) -> None:
    def rule(request: ApprovalRequest) -> ApprovalDecision:
        scope = "session" if request.tool == "t__note" else "conversation"
        return ApprovalDecision(approved=True, scope=scope)

    approver = Approver(rule)
    note, fail = call("t__note", key="k", text="v"), call("t__fail", message="x")
    script = [
        Step(tool_calls=[note]),  # asks: remembered for the session
        Step(tool_calls=[note, fail]),  # note by its key; fail asks: for this conversation
        Step(tool_calls=[fail]),  # by its key
        Step(tool_calls=[call("conv_create", user_instruction="you too")]),
        Step(tool_calls=[note, fail]),  # the child: note by the session's key; fail asks
        Step(text="child done"),
        Step(text="root done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approval_policy="on-write", approver=approver) as rt,
    ):
        session = rt.start_session()
        assert session.run("go", timeout=60).ok
        events = rt.store.read(session.session_id)
    assert approver.tools == ["t__note", "t__fail", "t__fail"]
    assert [d[2] for d in decisions(events)] == [
        "approver",
        "key",
        "approver",
        "key",
        "key",
        "approver",
    ]
    keys = [d.key for d in bodies(events, ToolApprovalDecided)]
    assert keys[0] == CommandKey("t__note") and keys[1] == keys[4] == keys[0]
    assert keys[2] == CommandKey("t__fail", conversation_id="id-2") == keys[3]
    child = approver.asked[2].conversation_id
    assert child != "id-2" and keys[5] == CommandKey("t__fail", conversation_id=child)
    with SqliteStore(tmp_path / "plait.db") as store:
        rows = audit(store, session.session_id)
    assert [(r.approval, r.decided_by) for r in rows if r.tool == "t__note"] == [
        ("approved", "approver"),
        ("approved", "key"),
        ("approved", "key"),
    ]


def test_an_args_pattern_limits_what_a_key_approves(tmp_path: Path, tools: Servers) -> None:
    approver = Approver(
        lambda r: ApprovalDecision(approved=True, scope="session", args_pattern='{"key":"a*"*')
    )
    script = [
        Step(tool_calls=[call("t__note", text="1", key="a1")]),  # asks; the key is for a*
        Step(tool_calls=[call("t__note", key="a2", text="2")]),  # by the key
        Step(tool_calls=[call("t__note", key="b1", text="3")]),  # not a*: asks
        Step(text="done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approval_policy="on-write", approver=approver) as rt,
    ):
        session = rt.start_session()
        assert session.run("go", timeout=60).ok
        events = rt.store.read(session.session_id)
    assert [d[2] for d in decisions(events)] == ["approver", "key", "approver"]


def test_keys_match_canonical_arguments_and_lapse_by_the_time_given() -> None:
    assert canonical_arguments('{ "b": 1, "a": [1, 2] }') == '{"a":[1,2],"b":1}'
    assert canonical_arguments("{not json") == "{not json"
    clock = TickClock()
    soon = clock.now + timedelta(seconds=60)
    state = ApprovalState(
        keys=[
            CommandKey("s__w", '{"path":"/tmp/*"}', None, soon),
            CommandKey("s__w", "*", "c1"),
        ]
    )
    assert state.match("c2", "s__w", '{"path": "/tmp/x"}', clock.now) == state.keys[0]
    assert state.match("c2", "s__w", '{"path": "/etc/x"}', clock.now) is None
    assert state.match("c1", "s__w", '{"path": "/etc/x"}', clock.now) == state.keys[1]
    assert state.match("c2", "s__w", '{"path": "/tmp/x"}', soon) is None
    assert state.expired(soon) == [state.keys[0]]
    assert state.expired(soon - timedelta(microseconds=1)) == []


def test_a_key_lapses_by_recorded_time_and_is_swept_with_an_event(
    tmp_path: Path, tools: Servers
) -> None:
    clock = TickClock()
    approver = Approver(lambda r: ApprovalDecision(approved=True, scope="session", ttl_sec=60))
    note = call("t__note", key="k", text="v")
    script = [Step(tool_calls=[note]), Step(text="1")] * 3
    with (
        ScriptedModelServer(script) as server,
        SqliteStore(tmp_path / "plait.db", clock=clock) as store,
    ):
        model = ModelSettings(base_url=server.base_url, api_key="test", model="m")
        ids = itertools.count(1)
        with Runtime(
            store,
            RuntimeSettings(
                model=model,
                mcp_servers=tools,
                new_id=lambda: f"id-{next(ids)}",
                approval_policy="on-write",
                approver=approver,
            ),
        ) as rt:
            session = rt.start_session()
            assert session.run("first", timeout=60).ok  # asks; remembered for 60 s
            clock.now += timedelta(seconds=30)
            assert session.run("second", timeout=60).ok  # by the key
            clock.now += timedelta(seconds=40)
            assert session.run("third", timeout=60).ok  # lapsed: swept, then asks
        events = store.read(session.session_id)
        assert replay(store, session.session_id, timeout=10).ok  # the sweep replays too
    assert [d[2] for d in decisions(events)] == ["approver", "key", "approver"]
    requested = next(e for e in events if isinstance(e.body, ToolApprovalRequested))
    key = bodies(events, ToolApprovalDecided)[0].key
    assert key.expires_at == requested.at + timedelta(seconds=60)
    [expired] = [e for e in events if isinstance(e.body, ApprovalKeyExpired)]
    assert expired.body.key == key and expired.at > key.expires_at
    later = [type(e.body).__name__ for e in events if e.seq > expired.seq][:2]
    assert later == ["ToolApprovalRequested", "ToolApprovalDecided"]


@pytest.mark.parametrize(
    ("case", "decided_by", "reason"),
    [
        ("no approver", "policy", "no approver to ask (policy 'on-write')"),
        ("timeout", "timeout", "no decision within 0.2 s"),
        ("raises", "error", "the approver failed: ValueError('broken')"),
        ("nonsense", "error", "the approver returned bool, not an ApprovalDecision"),
    ],
)
def test_approval_fails_closed(
    tmp_path: Path, tools: Servers, case: str, decided_by: str, reason: str
) -> None:
    def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise ValueError("broken")

    approver: Any = {
        "no approver": None,
        "timeout": Stuck(),
        "raises": broken,
        "nonsense": lambda request: True,
    }[case]
    script = [Step(tool_calls=[call("t__note", key="k", text="v")]), Step(text="not written")]
    with (
        ScriptedModelServer(script) as server,
        runtime(
            server,
            tmp_path,
            tools,
            approval_policy="on-write",
            approver=approver,
            approval_timeout_sec=0.2 if case == "timeout" else 300,
        ) as rt,
    ):
        session = rt.start_session()
        assert session.run("write", timeout=60).ok
        events = rt.store.read(session.session_id)
    [decided] = bodies(events, ToolApprovalDecided)
    assert (decided.approved, decided.decided_by) == (False, decided_by)
    assert decided.reason.startswith(reason)
    [answer] = bodies(events, ToolCallCompleted)
    assert answer.outcome == "refused" and f"denied by {decided_by}: {reason}" in answer.output
    assert bodies(events, ToolCallStarted) == []
    if case == "timeout":
        assert approver.cancelled.wait(10)  # its wait was cancelled, not left behind


@pytest.mark.parametrize("how", ["interrupt", "close"])
def test_an_abort_ends_the_wait_for_a_decision(tmp_path: Path, tools: Servers, how: str) -> None:
    approver = Stuck()
    script = [Step(tool_calls=[call("t__note", key="k", text="v")]), Step(text="after")]
    with (
        ScriptedModelServer(script) as server,
        runtime(server, tmp_path, tools, approval_policy="on-write", approver=approver) as rt,
    ):
        session = rt.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("write")
            wait_for(feed, ToolApprovalRequested)
            assert approver.asked.wait(10)
            if how == "interrupt":
                session.interrupt()
                aborted = wait_for(feed, TurnAborted)
            else:
                session.close()  # cancels the task: it stops at once, not after a timeout
        assert approver.cancelled.wait(10)
        if how == "interrupt":
            assert aborted.body.reason == "interrupted"
            assert session.run("again", timeout=60).last_assistant_message == "after"
        events = rt.store.read(session.session_id)
    assert bodies(events, ToolApprovalDecided) == bodies(events, ToolCallStarted) == []
    [aborted_body] = bodies(events, TurnAborted)
    assert aborted_body.cause == ("user" if how == "interrupt" else "close")
    assert_histories_valid(events)  # the waiting call was answered ("aborted: interrupted")
    with SqliteStore(tmp_path / "plait.db") as store:
        assert replay(store, session.session_id, timeout=10).ok


def test_keys_are_rebuilt_when_a_session_is_resumed(tmp_path: Path, tools: Servers) -> None:
    first = Approver(lambda r: ApprovalDecision(approved=True, scope="session"))
    note = call("t__note", key="k", text="v")
    with (
        ScriptedModelServer([Step(tool_calls=[note]), Step(text="1")]) as server,
        runtime(server, tmp_path, tools, approval_policy="on-write", approver=first) as rt,
    ):
        session_id = rt.start_session().session_id
        assert rt.resume(session_id).run("first", timeout=60).ok
    later = Approver()
    with (
        ScriptedModelServer([Step(tool_calls=[note]), Step(text="2")]) as server,
        runtime_for(server, tmp_path, mcp_servers=tools, approver=later) as rt,
    ):
        assert rt.resume(session_id).run("second", timeout=60).ok  # still "on-write"
        events = rt.store.read(session_id)
    assert first.tools == ["t__note"] and later.tools == []
    assert [d[2] for d in decisions(events)] == ["approver", "key"]


def crash_while_waiting(tmp_path: Path, tools: Servers) -> str:
    """Stop a session's process (nothing more recorded) while a call waits for approval."""
    approver = Stuck()
    script = [Step(tool_calls=[call("t__echo", text="a"), call("t__note", key="k", text="v")])]
    with ScriptedModelServer(script) as server:
        rt = runtime(
            server,
            tmp_path,
            tools,
            approval_policy="on-write",
            approver=approver,
            expire_every_sec=None,
        )
        session = rt.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("echo, then write")
            wait_for(feed, ToolApprovalRequested)
        crash(rt, session)  # the process dies
    return session.session_id


def test_recovery_denies_a_call_that_was_waiting_for_approval(
    tmp_path: Path, tools: Servers
) -> None:
    session_id = crash_while_waiting(tmp_path, tools)
    approver = Approver()
    with (
        ScriptedModelServer([Step(text="the write was denied")]) as server,
        runtime_for(server, tmp_path, mcp_servers=tools, approver=approver) as rt,
    ):
        before = rt.store.last_seq(session_id)
        [recovered] = rt.recover()
        assert recovered.crashed_task is not None
        session = rt.resume(session_id)
        assert session.run("and now?", timeout=60).ok
        events = rt.store.read(session_id)
    marker, *after = [e.body for e in events if e.seq > before]
    assert isinstance(marker, SessionResumed)  # where this process took the session over
    assert marker.crashed_task_id == recovered.crashed_task
    assert [type(b).__name__ for b in after[:3]] == [
        "ToolApprovalDecided",
        "ToolCallCompleted",
        "TurnAborted",
    ]
    assert (after[0].approved, after[0].decided_by) == (False, "recovery")
    assert (after[1].output, after[1].outcome, after[1].aborted_by) == (
        UNAPPROVED,
        "refused",
        "crash",
    )
    assert (after[2].reason, after[2].cause) == ("crashed", "crash")
    assert approver.asked == []  # nobody was asked after the fact
    assert_histories_valid(events)
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session_id, timeout=10)  # across the crash
        assert result.ok, result.divergence and result.divergence.message()
        rows = audit(store, session_id)
    assert [(r.tool, r.approval, r.decided_by, r.outcome) for r in rows] == [
        ("t__echo", "not required", None, "ok"),
        ("t__note", "denied", "recovery", "refused"),
    ]


def test_a_session_keeps_its_policy_and_a_bad_one_is_refused(
    tmp_path: Path, tools: Servers
) -> None:
    with ScriptedModelServer([]) as server:
        with pytest.raises(ConfigError, match="approval policy 'sometimes'"):
            runtime(server, tmp_path, tools, approval_policy="sometimes")
        with runtime(server, tmp_path, tools, approval_policy="untrusted") as rt:
            session: SessionHandle = rt.start_session()
            with pytest.raises(ConfigError, match="expected one of never, on-request"):
                session.change_context(approval_policy="always")  # type: ignore[arg-type]
            events = rt.store.read(session.session_id)
    assert events[0].body.approval_policy == "untrusted"
    assert not any(isinstance(e.body, TaskCompleted) for e in events)
