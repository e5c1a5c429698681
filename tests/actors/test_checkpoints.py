"""The four interrupt checkpoints (docs/interrupts.md#checkpoints), each with the history it leaves:

1. the reply is recorded and no call has begun (here: they wait for approval): every call is
   answered with the cancel message and the interrupt message follows;
2. every call is answered and the next request is not sent (here: a compaction is out): the
   interrupt text is added to the last tool output;
3. a call has not begun (here: the second of a serial batch waits for approval): it is
   answered with the cancel message, the first keeps its result;
4. a call is running: it is cancelled and answered with the cancel message.

A test MCP server over stdio, a scripted model over HTTP; each session replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripted import Stuck, assert_histories_valid, assert_ids, call, local_mcp_servers, runtime_for

from plait import HistorySettings
from plait.actors import Feed
from plait.events import (
    CANCEL_MESSAGE,
    INTERRUPT_MESSAGE,
    INTERRUPT_TEXT,
    Event,
    ModelRequested,
    SqliteStore,
    TokensCounted,
    ToolApprovalRequested,
    ToolCallStarted,
    TurnAborted,
)
from plait.replay import audit, replay
from plait.runtime import SessionHandle
from plait.testing import ScriptedModelServer, Step

TEST_SERVER = local_mcp_servers()


def _wait_for(feed: Feed, kind: type[Any], **fields: Any) -> Event:
    while (item := feed.get(timeout=30)) is not None:
        body = item.body if isinstance(item, Event) else None
        if isinstance(body, kind) and all(getattr(body, k) == v for k, v in fields.items()):
            return item
    raise AssertionError(f"no {kind.__name__} {fields} within 30 s")


def _interrupt_at(
    session: SessionHandle,
    prompt: str,
    kind: type[Any],
    *,
    requests: tuple[ScriptedModelServer, int] | None = None,
    **fields: Any,
) -> int:
    """Submit ``prompt``, interrupt once ``kind`` is recorded (and, with ``requests``, once
    the model server has had that many requests); return the checkpoint."""
    with session.subscribe(transient=False) as feed:
        session.submit(prompt)
        _wait_for(feed, kind, **fields)
        if requests is not None:
            server, count = requests
            server.wait_for_requests(count)
        session.interrupt()
        aborted = _wait_for(feed, TurnAborted)
    assert isinstance(aborted.body, TurnAborted)
    assert aborted.body.reason == "interrupted"
    return aborted.body.checkpoint


def _calls(history: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for m in history for c in m.get("tool_calls") or []]


def _check_log(tmp_path: Path, session: SessionHandle, events: list[Event]) -> None:
    assert_histories_valid(events)
    assert_ids(events)
    with SqliteStore(tmp_path / "plait.db") as store:
        result = replay(store, session.session_id, timeout=10)
    assert result.ok, result.divergence and result.divergence.message()


def test_checkpoint_1_reply_recorded_no_call_begun(tmp_path: Path) -> None:
    calls = [call("t__echo", text="a"), call("t__echo", text="b")]
    script = [Step(text="Checking both.", tool_calls=calls), Step(text="Stopped, as asked.")]
    approver = Stuck()
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server,
            tmp_path,
            mcp_servers=TEST_SERVER,
            approval_policy="untrusted",
            approver=approver,
        ) as rt,
    ):
        session = rt.start_session()
        assert _interrupt_at(session, "check", ToolApprovalRequested) == 1
        history = session.history()
        assert session.run("why did you stop?", timeout=30).ok
        events = rt.store.read(session.session_id)
    first, second = _calls(history)
    assert history == [
        {"role": "user", "content": "check"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": history[1]["tool_calls"]},
        {"role": "tool", "content": CANCEL_MESSAGE, "tool_call_id": first},
        {"role": "tool", "content": CANCEL_MESSAGE, "tool_call_id": second},
        {"role": "user", "content": INTERRUPT_MESSAGE},
    ]
    # The model is shown the interrupt with the next task.
    assert server.requests[-1].messages[1:] == [
        *history,
        {"role": "user", "content": "why did you stop?"},
    ]
    _check_log(tmp_path, session, events)


def test_checkpoint_2_every_call_answered_next_request_not_sent(tmp_path: Path) -> None:
    script = [
        Step(text="Hello.", prompt_tokens=20, completion_tokens=2),
        Step(tool_calls=[call("conv_list")], prompt_tokens=950, completion_tokens=5),
        # The compaction before the next turn: slow, so the interrupt finds it out.
        Step(text="summary " * 200, chunk_chars=4, chunk_delay=0.05),
        Step(text="A summary."),  # the next task's compaction
        Step(text="You stopped me."),
    ]
    history_settings = HistorySettings(context_window=1000, keep_recent_tokens=1)
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, history=history_settings) as rt,
    ):
        session = rt.start_session()
        session.run("hi", timeout=30)
        # Once the compaction reached the server: its step is not left for the next request.
        compaction = (server, 3)
        checkpoint = _interrupt_at(
            session, "list", ModelRequested, requests=compaction, purpose="compact"
        )
        assert checkpoint == 2
        history = session.history()
        assert session.run("why?", timeout=30).ok
        events = rt.store.read(session.session_id)
    (call_id,) = _calls(history)
    assert history[:3] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "list"},
    ]
    assert history[3]["tool_calls"][0]["function"]["name"] == "conv_list"
    tool = history[4]
    assert (tool["role"], tool["tool_call_id"]) == ("tool", call_id)
    assert tool["content"].startswith('{"conversations"')
    assert tool["content"].endswith(INTERRUPT_TEXT)
    assert len(history) == 5
    # The model is shown the interrupt with the next task (here: its compaction first, which
    # sends the history as one transcript).
    (transcript,) = server.requests[-2].messages[1:]
    assert f"[tool result {call_id}]: {tool['content']}" in transcript["content"]
    _check_log(tmp_path, session, events)


def test_checkpoint_3_a_call_not_begun_is_cancelled(tmp_path: Path) -> None:
    calls = [call("t__echo", text="first"), call("t__note", key="k", text="v")]
    script = [Step(tool_calls=calls)]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(
            server,
            tmp_path,
            mcp_servers=TEST_SERVER,
            approval_policy="on-write",
            approver=Stuck(),
        ) as rt,
    ):
        session = rt.start_session()
        # t__note writes, so the batch is serial: t__echo ran, t__note waits for approval.
        assert _interrupt_at(session, "echo then note", ToolApprovalRequested) == 3
        history = session.history()
        events = rt.store.read(session.session_id)
        rows = {row.tool: row.outcome for row in audit(rt.store, session.session_id)}
    echo, note = _calls(history)
    assert history[2:] == [
        {"role": "tool", "content": "first", "tool_call_id": echo},
        {"role": "tool", "content": CANCEL_MESSAGE, "tool_call_id": note},
    ]
    assert len(history) == 4
    assert rows == {"t__echo": "ok", "t__note": "cancelled"}
    _check_log(tmp_path, session, events)


def test_checkpoint_4_a_running_call_is_cancelled(tmp_path: Path) -> None:
    script = [Step(tool_calls=[call("t__slow", seconds=60)]), Step(text="Fine, stopping.")]
    with (
        ScriptedModelServer(script) as server,
        runtime_for(server, tmp_path, mcp_servers=TEST_SERVER) as rt,
    ):
        session = rt.start_session()
        assert _interrupt_at(session, "wait a minute", ToolCallStarted) == 4
        history = session.history()
        events = rt.store.read(session.session_id)
        (row,) = audit(rt.store, session.session_id)
    (slow,) = _calls(history)
    assert history[2:] == [{"role": "tool", "content": CANCEL_MESSAGE, "tool_call_id": slow}]
    assert len(history) == 3
    assert row.outcome == "unknown"  # it was sent to its server: it may have acted
    _check_log(tmp_path, session, events)


def test_an_interrupt_during_the_model_request_keeps_the_history_and_counts_its_tokens(
    tmp_path: Path,
) -> None:
    script = [Step(text="long " * 200, chunk_chars=4, chunk_delay=0.05)]
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path) as rt:
        session = rt.start_session(base_instructions="Be brief.")
        assert _interrupt_at(session, "talk", ModelRequested) == 0
        assert session.history() == [{"role": "user", "content": "talk"}]
        events = rt.store.read(session.session_id)
        stats = session.stats()
    # The request was sent, so it counts: the server never said how much, so plait estimates.
    aborted, counted = events[-2:]
    assert isinstance(aborted.body, TurnAborted) and isinstance(counted.body, TokensCounted)
    assert counted.body.estimated and counted.body.usage.prompt_tokens > 0
    (root,) = stats.values()
    assert root.usage.prompt_tokens == counted.body.usage.prompt_tokens
    _check_log(tmp_path, session, events)
