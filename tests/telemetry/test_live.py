"""Spans and metrics exported live by a runtime, as its sessions' events land, compared with
the spans built later from the log (docs/telemetry.md#live)."""

from __future__ import annotations

from pathlib import Path

import pytest
from otlp_receiver import OtlpReceiver, ReceivedSpan
from scripted import call, crash, runtime_for
from support import wait_for_event

from plait.events import ModelRequested, SqliteStore
from plait.telemetry import Span, TelemetrySettings, spans_of
from plait.testing import ScriptedModelServer, Step

ERROR = 2  # the OTLP status code of a span that failed


def as_built(tmp_path: Path, session_id: str) -> dict[str, Span]:
    """The session's spans built from its log now, by span id (hex)."""
    with SqliteStore(tmp_path / "plait.db") as store:
        spans = spans_of(session_id, store.read(session_id))
    return {f"{span.span_id:016x}": span for span in spans}


def same_spans(received: list[ReceivedSpan], built: dict[str, Span]) -> None:
    """Assert the receiver got exactly the spans built from the log, ids, parents and times."""
    assert sorted(s.span_id for s in received) == sorted(built)
    for got in received:
        span = built[got.span_id]
        assert got.trace_id == f"{span.trace_id:032x}"
        assert got.parent_span_id == ("" if span.parent_id is None else f"{span.parent_id:016x}")
        assert (got.name, got.attributes) == (span.name, span.attributes)
        assert span.end is not None
        assert got.end_ns == int(span.end.timestamp()) * 10**9 + span.end.microsecond * 1000


def test_failed_and_interrupted_work_sets_the_span_status(tmp_path: Path) -> None:
    steps = [Step(status=500), Step(text="thinking", endless=True), Step(text="done")]
    with OtlpReceiver() as receiver, ScriptedModelServer(steps) as server:
        settings = TelemetrySettings(endpoint=receiver.url)
        with runtime_for(server, tmp_path, {"max_attempts": 1}, telemetry=settings) as runtime:
            session = runtime.start_session()
            assert session.run("fail", timeout=30).status == "model_error"
            before = runtime.store.last_seq(session.session_id)
            session.submit("think")
            wait_for_event(runtime.store, session.session_id, ModelRequested, after=before)
            session.interrupt()
            assert session.run("again", timeout=30).last_assistant_message == "done"
            session.close()
        assert runtime.telemetry is not None
        stats = runtime.telemetry.stats
        received = receiver.wait_for_spans(lambda got: len(got) >= stats.spans)
    assert (stats.spans, stats.exported, stats.dropped) == (6, 6, 0)
    same_spans(received, as_built(tmp_path, session.session_id))
    failed_task, cut_task, done_task = sorted(
        (s for s in received if s.name == "invoke_agent root"), key=lambda s: s.start_ns
    )
    failed_chat, cut_chat, done_chat = sorted(
        (s for s in received if s.name.startswith("chat ")), key=lambda s: s.start_ns
    )
    assert (failed_chat.status_code, failed_chat.attributes["error.type"]) == (ERROR, "500")
    assert (failed_task.status_code, failed_task.attributes["error.type"]) == (ERROR, "failed")
    assert (cut_chat.status_code, cut_chat.attributes["error.type"]) == (ERROR, "cancelled")
    assert (cut_task.status_code, cut_task.attributes["error.type"]) == (ERROR, "interrupted")
    [aborted] = cut_task.events
    assert aborted.attributes["plait.abort.reason"] == "interrupted"
    assert (done_task.status_code, done_chat.status_code) == (0, 0)
    assert "error.type" not in done_task.attributes


def test_a_crashed_task_is_exported_failed_by_the_process_that_takes_over(
    tmp_path: Path,
) -> None:
    with OtlpReceiver() as receiver:
        settings = TelemetrySettings(endpoint=receiver.url, metrics=False)
        with ScriptedModelServer([Step(text="working", endless=True)]) as server:
            runtime = runtime_for(server, tmp_path, telemetry=settings, expire_every_sec=None)
            session = runtime.start_session()
            session.submit("go")
            wait_for_event(runtime.store, session.session_id, ModelRequested)
            crash(runtime, session)  # its telemetry thread stops with its store
        assert receiver.spans() == []  # nothing had ended
        with (
            ScriptedModelServer([Step(text="back")]) as server,
            runtime_for(server, tmp_path, telemetry=settings) as again,
        ):
            resumed = again.resume(session.session_id)
            assert resumed.run("are you there?", timeout=30).last_assistant_message == "back"
        received = receiver.wait_for_spans(lambda got: len(got) >= 4)
    built = as_built(tmp_path, session.session_id)
    same_spans(received, built)
    crashed, after = sorted(
        (s for s in received if s.name == "invoke_agent root"), key=lambda s: s.start_ns
    )
    assert (crashed.status_code, crashed.attributes["error.type"]) == (ERROR, "crashed")
    [aborted] = crashed.events
    assert aborted.attributes["plait.abort.reason"] == "crashed"
    # It ends where the log last saw it run, not when the next process found it.
    assert crashed.end_ns < after.start_ns
    assert aborted.attributes["plait.recovered_at"] > ""
    assert after.status_code == 0


def test_a_backend_that_refuses_costs_the_sessions_nothing_and_is_said_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with OtlpReceiver() as receiver, ScriptedModelServer([Step(text="ok")] * 3) as server:
        receiver.status = 503
        settings = TelemetrySettings(endpoint=receiver.url, metrics=False)
        with runtime_for(server, tmp_path, telemetry=settings) as runtime:
            session = runtime.start_session()
            for prompt in ("one", "two", "three"):
                assert session.run(prompt, timeout=30).last_assistant_message == "ok"
            session.close()
        assert runtime.telemetry is not None
        stats = runtime.telemetry.stats
    assert (stats.spans, stats.exported, stats.dropped) == (6, 0, 6)
    said = [line for line in capfd.readouterr().err.splitlines() if "telemetry" in line]
    assert len(said) == 1, said
    assert said[0].startswith(f"plait: telemetry: {receiver.url}/v1/traces did not take")
    assert "dropped and counted" in said[0]


def test_a_backend_that_hangs_costs_the_sessions_nothing(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver, ScriptedModelServer([Step(text="ok")] * 2) as server:
        receiver.hold.clear()  # every export waits, unanswered
        settings = TelemetrySettings(endpoint=receiver.url, metrics=False)
        with runtime_for(server, tmp_path, telemetry=settings) as runtime:
            session = runtime.start_session()
            for prompt in ("one", "two"):
                assert session.run(prompt, timeout=30).last_assistant_message == "ok"
            session.close()
        assert runtime.telemetry is not None
        stats = runtime.telemetry.stats
        assert receiver.spans() == []
    assert (stats.spans, stats.exported, stats.dropped) == (4, 0, 4)


def test_metrics_count_tokens_durations_tasks_calls_and_appends(tmp_path: Path) -> None:
    def stock(item: str) -> str:
        """Count an item in stock."""
        return f"3 {item}"

    steps = [Step(tool_calls=[call("stock", item="apples")]), Step(text="3 apples.")]
    with OtlpReceiver() as receiver, ScriptedModelServer(steps) as server:
        settings = TelemetrySettings(endpoint=receiver.url)
        with runtime_for(server, tmp_path, telemetry=settings, tools=[stock]) as runtime:
            session = runtime.start_session()
            assert session.run("apples?", timeout=30).last_assistant_message == "3 apples."
            session.close()
        points = receiver.wait_for_points(
            lambda got: (
                {"plait.events.appended", "gen_ai.client.token.usage"} <= {p.name for p in got}
            )
        )
    names = {p.name for p in points}
    assert names == {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "plait.tasks",
        "plait.tool_calls",
        "plait.events.appended",
    }
    tokens = {
        p.attributes["gen_ai.token.type"]: p
        for p in points
        if p.name == "gen_ai.client.token.usage"
    }
    assert set(tokens) == {"input", "output"}
    assert all(p.count == 2 and p.unit == "{token}" for p in tokens.values())
    durations = [p for p in points if p.name == "gen_ai.client.operation.duration"]
    assert [(p.attributes["gen_ai.operation.name"], p.count) for p in durations] == [("chat", 2)]
    assert all(p.unit == "s" and p.kind == "histogram" for p in durations)
    [calls] = [p for p in points if p.name == "plait.tool_calls"]
    assert calls.attributes == {"gen_ai.tool.name": "stock", "plait.tool.outcome": "ok"}
    assert calls.value == 1
    [tasks] = [p for p in points if p.name == "plait.tasks"]
    assert (tasks.attributes, tasks.value) == ({"plait.task.outcome": "ok"}, 1)
    appended = {
        p.attributes["plait.event.type"]: p.value
        for p in points
        if p.name == "plait.events.appended"
    }
    assert appended["ToolCallCompleted"] == 1 and appended["ModelResponded"] == 2


def test_a_session_closed_and_reopened_in_one_process_exports_what_a_trace_builds(
    tmp_path: Path,
) -> None:
    with (
        OtlpReceiver() as receiver,
        ScriptedModelServer([Step(text="1"), Step(text="2")]) as server,
    ):
        settings = TelemetrySettings(endpoint=receiver.url, metrics=False)
        with runtime_for(server, tmp_path, telemetry=settings) as runtime:
            session = runtime.start_session()
            assert session.run("first", timeout=30).last_assistant_message == "1"
            session.close()
            again = runtime.resume(session.session_id)
            assert again.run("second", timeout=30).last_assistant_message == "2"
            again.close()
        received = receiver.wait_for_spans(lambda got: len(got) >= 4)
    same_spans(received, as_built(tmp_path, session.session_id))
    assert [s.name for s in received if s.name.startswith("invoke_agent")] == [
        "invoke_agent root",
        "invoke_agent root",
    ]
