"""Live reruns: a recorded session's tasks sent to a model again, its calls answered from the
log, and the report of what changed (docs/replay.md#live-reruns). The test MCP server is the
module's, over streamable HTTP (``mcp_url``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripted import call, crash
from support import wait_for_event

from plait import ApprovalDecision, ApprovalRequest
from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import (
    EventStore,
    ModelRequested,
    RerunOrigin,
    SessionStarted,
    SqliteStore,
    TaskCompleted,
    TaskStarted,
    ToolApprovalDecided,
)
from plait.replay import RerunReport, fork, replay, rerun, rerun_each
from plait.replay._answers import NOT_RECORDED
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import RecordedRequest, ScriptedModelServer, Step

PROMPTS = ["Count the apples.", "And the pears?"]
Servers = dict[str, McpServerConfig]


@pytest.fixture(scope="module")
def servers(mcp_url: str) -> Servers:
    """The test server as ``t``, for the original and its reruns."""
    return {"t": McpServerConfig(url=mcp_url)}


def stock(item: str) -> str:
    """Count an item in stock."""
    return f"3 {item}"


def script() -> list[Step]:
    """The original's model: an MCP call, a function call, a conv_create chain, then a plain
    answer to the second prompt."""
    create = {"user_instruction": "Echo done.", "base_instruction_text": "You echo."}
    return [
        Step(
            text="Looking.",
            tool_calls=[call("t__echo", text="apples"), call("stock", item="apples")],
        ),
        Step(text="Asking a helper.", tool_calls=[call("conv_create", **create)]),
        Step(text="done"),  # the helper
        Step(text="There are 3 apples."),  # the continuation
        Step(text="No pears."),
    ]


def settings(server: ScriptedModelServer, wire: str = "chat") -> ModelSettings:
    return ModelSettings(
        base_url=server.base_url, api_key="k", model="scripted-model", wire_api=wire
    )


def approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(approved=True, reason="fine")


def record(store_path: Path, servers: Servers, wire: str = "chat") -> str:
    with (
        ScriptedModelServer(script()) as server,
        Runtime(
            store_path,
            RuntimeSettings(
                model=settings(server, wire),
                mcp_servers=servers,
                tools=[stock],
                expire_every_sec=None,
                approval_policy="untrusted",
                approver=approve,
            ),
        ) as runtime,
    ):
        session = runtime.start_session()
        for prompt in PROMPTS:
            assert session.run(prompt, timeout=60).ok
        session.close()
    return session.session_id


def run_again(
    store: EventStore,
    session_id: str,
    steps: list[Step],
    servers: Servers,
    wire: str = "chat",
    **options: Any,
) -> tuple[RerunReport, list[RecordedRequest]]:
    """Rerun ``session_id`` against a model that answers ``steps`` (on ``wire``); return the
    report and what the model was sent."""
    with ScriptedModelServer(steps) as server:
        report = rerun(
            store,
            session_id,
            model=settings(server, wire),
            mcp_servers=servers,
            tools=[stock],
            **options,
        )
        return report, server.requests


def test_the_same_model_reruns_the_session_with_no_difference(
    tmp_path: Path, servers: Servers
) -> None:
    session_id = record(tmp_path / "plait.db", servers)
    with SqliteStore(tmp_path / "plait.db") as store:
        report, _ = run_again(store, session_id, script(), servers)
        assert not report.differs()
        assert [t.same_answer and t.same_tools for t in report.tasks] == [True, True]
        first, second = report.tasks
        assert first.rerun_answer == "There are 3 apples." and second.rerun_answer == "No pears."
        assert (first.from_log, first.not_recorded) == (2, 0)  # t__echo and stock, from the log
        assert first.divergence is None and first.similarity == 1.0
        assert report.rerun_session_id is not None
        started = store.read(report.rerun_session_id, upto=1)[0].body
        assert isinstance(started, SessionStarted) and started.forked_from is not None
        assert (started.forked_from.stream, started.forked_from.rerun) == (
            session_id,
            RerunOrigin("scripted-model", report.base_url, live_tools=False),
        )
        decided = [
            e.body
            for e in store.read(report.rerun_session_id)
            if isinstance(e.body, ToolApprovalDecided)
        ]
        assert [(d.approved, d.decided_by) for d in decided] == [(True, "log")] * 2
        # The rerun is a session of its own: its log verifies and replays clean.
        assert store.verify(report.rerun_session_id).ok
        replayed = replay(store, report.rerun_session_id, timeout=10)
        assert replayed.ok, replayed.divergence and replayed.divergence.message()


@pytest.mark.parametrize(("recorded", "now"), [("chat", "responses"), ("responses", "chat")])
def test_a_session_recorded_on_one_wire_reruns_on_the_other(
    tmp_path: Path, servers: Servers, recorded: str, now: str
) -> None:
    session_id = record(tmp_path / "plait.db", servers, recorded)
    with SqliteStore(tmp_path / "plait.db") as store:
        report, requests = run_again(store, session_id, script(), servers, now)
        assert {r.wire for r in requests} == {now}
        assert not report.differs()
        assert [t.same_answer and t.same_tools for t in report.tasks] == [True, True]
        assert report.rerun_session_id is not None
        sent = [
            e.body
            for e in store.read(report.rerun_session_id)
            if isinstance(e.body, ModelRequested)
        ]
        assert {r.wire_api for r in sent} == {now}
        replayed = replay(store, report.rerun_session_id, timeout=10)
        assert replayed.ok, replayed.divergence and replayed.divergence.message()


def test_a_model_whose_answers_change_is_reported_task_by_task(
    tmp_path: Path, servers: Servers
) -> None:
    session_id = record(tmp_path / "plait.db", servers)
    changed = script()
    changed[-1] = Step(text="Two pears, in fact.")
    with SqliteStore(tmp_path / "plait.db") as store:
        report, _ = run_again(store, session_id, changed, servers)
    assert report.differs("answers") and report.differs() and not report.differs("tools")
    first, second = report.tasks
    assert first.same_answer and not second.same_answer
    assert (second.recorded_answer, second.rerun_answer) == ("No pears.", "Two pears, in fact.")
    assert second.diff[-2:] == ["-No pears.", "+Two pears, in fact."]
    assert 0 < second.similarity < 1
    assert second.divergence == (
        "reply 1: recorded answers 'No pears.'; rerun answers 'Two pears, in fact.'"
    )


def test_a_call_the_original_never_made_is_added_and_answered_not_recorded(
    tmp_path: Path, servers: Servers
) -> None:
    session_id = record(tmp_path / "plait.db", servers)
    other = script()
    other[-1] = Step(tool_calls=[call("t__echo", text="pears")])
    other.append(Step(text="Still no pears."))
    with SqliteStore(tmp_path / "plait.db") as store:
        report, requests = run_again(store, session_id, other, servers, save=False)
        assert report.rerun_session_id is None
        assert len(store.streams()) == 1  # nothing kept
    second = report.tasks[1]
    assert report.differs("tools") and not second.same_tools
    assert [(c.tool, c.arguments) for c in second.added] == [("t__echo", '{"text":"pears"}')]
    assert (second.from_log, second.not_recorded) == (0, 1)
    shown = [m for m in requests[-1].body["messages"] if m.get("role") == "tool"]
    assert shown[-1]["content"].startswith(NOT_RECORDED)


def test_with_live_tools_a_call_the_original_never_made_runs(
    tmp_path: Path, servers: Servers
) -> None:
    session_id = record(tmp_path / "plait.db", servers)
    other = script()
    other[-1] = Step(tool_calls=[call("t__echo", text="pears")])
    other.append(Step(text="Echoed."))
    with SqliteStore(tmp_path / "plait.db") as store:
        report, requests = run_again(
            store, session_id, other, servers, live_tools=True, approver=approve, save=False
        )
    assert report.tasks[1].not_recorded == 1
    shown = [m for m in requests[-1].body["messages"] if m.get("role") == "tool"]
    assert shown[-1]["content"] == "pears"  # the test server's echo, run for real


def plain_sessions(store_path: Path, count: int) -> list[str]:
    """``count`` closed sessions of one task each, answered "answer"."""
    ids = []
    with (
        ScriptedModelServer([Step(text="answer")] * count) as server,
        Runtime(
            store_path, RuntimeSettings(model=settings(server), expire_every_sec=None)
        ) as runtime,
    ):
        for n in range(count):
            session = runtime.start_session()
            assert session.run(f"question {n}", timeout=60).ok
            session.close()
            ids.append(session.session_id)
    return ids


def test_twenty_sessions_rerun_at_once_each_on_its_own_log(tmp_path: Path) -> None:
    ids = plain_sessions(tmp_path / "plait.db", 20)
    slow = Step(text="answer", chunk_chars=1, chunk_delay=0.05)  # each answer takes a while
    with SqliteStore(tmp_path / "plait.db") as store, ScriptedModelServer([slow] * 20) as server:
        results = rerun_each(store, ids, concurrency=20, model=settings(server))
        runs = []
        for result in results.values():
            assert isinstance(result, RerunReport) and not result.differs(), result
            assert result.rerun_session_id is not None
            events = store.read(result.rerun_session_id)
            started = next(e.at for e in events if isinstance(e.body, TaskStarted))
            ended = next(e.at for e in events if isinstance(e.body, TaskCompleted))
            runs.append((started, ended))
    assert list(results) == ids
    # Run at once, not one after another: some moment saw several reruns' tasks running.
    busiest = max(sum(1 for s, e in runs if s <= at < e) for at, _ in runs)
    assert busiest >= 2, runs


def test_a_crash_recovered_session_and_a_fork_rerun_too(tmp_path: Path) -> None:
    with ScriptedModelServer([Step(text="working", endless=True)]) as server:
        runtime = Runtime(
            tmp_path / "plait.db", RuntimeSettings(model=settings(server), expire_every_sec=None)
        )
        session = runtime.start_session()
        session.submit("first")
        wait_for_event(runtime.store, session.session_id, ModelRequested)
        crash(runtime, session)
    with (
        ScriptedModelServer([Step(text="second answer")]) as server,
        Runtime(
            tmp_path / "plait.db", RuntimeSettings(model=settings(server), expire_every_sec=None)
        ) as again,
    ):
        assert again.resume(session.session_id).run("second", timeout=60).ok
    with SqliteStore(tmp_path / "plait.db") as store:
        steps = [Step(text="first answer"), Step(text="second answer")]
        with ScriptedModelServer(steps) as server:
            report = rerun(store, session.session_id, model=settings(server), save=False)
        crashed, second = report.tasks
        assert (crashed.recorded_answer, crashed.rerun_answer) == (None, "first answer")
        assert second.same_answer and second.same_tools
        forked = fork(store, session.session_id, store.last_seq(session.session_id))
        with ScriptedModelServer(steps) as server:
            of_fork = rerun(store, forked, model=settings(server), save=False)
        assert [t.rerun_answer for t in of_fork.tasks] == ["first answer", "second answer"]
