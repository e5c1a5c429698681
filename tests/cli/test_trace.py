"""``plait trace`` and the live export: sessions as OpenTelemetry GenAI spans, received by a
real OTLP/HTTP receiver (docs/telemetry.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from otlp_receiver import OtlpReceiver, ReceivedSpan
from scripted import call, record_session

from plait.cli._demo import QUESTION
from plait.events import SqliteStore, StoragePolicy
from plait.testing import Step

if TYPE_CHECKING:
    from conftest import Cli

GOLDEN = Path(__file__).parent.parent / "golden" / "v1-demo.sqlite"
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
MARKER = "Quentin Marsh-Oyelaran"


def only_session(cli: Cli, *where: str) -> str:
    listed = cli(*where, "sessions", "--json")
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    return str(row["session_id"])


def shape(spans: list[ReceivedSpan]) -> list[tuple[Any, ...]]:
    """What a backend keys and shows of each span, in a stable order."""
    return sorted(
        (
            *(s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start_ns, s.end_ns),
            *(sorted(s.attributes.items()), [(e.name, e.time_ns) for e in s.events], s.status_code),
        )
        for s in spans
    )


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def traced_json(cli: Cli, *args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The spans ``plait trace ARGS --json`` prints."""
    done = cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    request = json.loads(done.stdout)
    return [
        span
        for resource in request["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]


def test_the_demo_exported_live_and_later_is_the_same_spans_in_the_genai_conventions(
    cli: Cli,
) -> None:
    with OtlpReceiver() as live:
        ran = cli("demo", env={"OTEL_EXPORTER_OTLP_ENDPOINT": live.url})
        assert ran.returncode == 0, ran.stderr
        sent_live = live.wait_for_spans(lambda got: len(got) >= 9)
    session = only_session(cli)
    with OtlpReceiver() as later:
        traced = cli("trace", session, "--endpoint", later.url)
        assert traced.returncode == 0, traced.stderr
        assert traced.stdout == f"{session}: 9 spans sent to {later.url}/v1/traces\n"
        sent_later = later.wait_for_spans(lambda got: len(got) >= 9)
    assert shape(sent_live) == shape(sent_later)  # a backend keeps one copy of each
    assert len({s.span_id for s in sent_later}) == 9
    assert {s.trace_id for s in sent_later} == {sent_later[0].trace_id}  # one user request
    assert {s.resource["service.name"] for s in sent_live + sent_later} == {"plait"}

    [root, continuation] = by_name(sent_later, "invoke_agent root")
    [create] = by_name(sent_later, "execute_tool conv_create")
    [helper] = [
        s
        for s in sent_later
        if s.name.startswith("invoke_agent ") and s not in (root, continuation)
    ]
    [pending] = by_name(sent_later, "execute_tool release__pending_changes")
    chats = by_name(sent_later, "chat scripted-model")
    # The chain conv_create made: the helper's run hangs under the call, the caller's
    # continuation under the run that made the call.
    assert root.parent_span_id == ""
    assert create.parent_span_id == root.span_id
    assert helper.parent_span_id == create.span_id
    assert pending.parent_span_id == helper.span_id
    assert continuation.parent_span_id == root.span_id
    assert sorted(c.parent_span_id for c in chats) == sorted(
        [root.span_id, helper.span_id, helper.span_id, continuation.span_id]
    )
    assert create.end_ns >= helper.end_ns  # the call returned the helper's answer

    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "root"
    assert root.attributes["session.id"] == session
    assert helper.attributes["gen_ai.conversation.id"] != root.attributes["gen_ai.conversation.id"]
    [event] = root.events
    assert event.name == "plait.turn.aborted"
    assert event.attributes["plait.abort.reason"] == "replaced"
    assert root.status_code == 0  # replaced is not a failure: the continuation goes on

    chat = chats[0]
    assert chat.kind == 3  # client
    assert {k: v for k, v in chat.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "scripted-model",
        "gen_ai.response.model": "scripted-model",
        "gen_ai.response.id": chat.attributes["gen_ai.response.id"],
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": chat.attributes["gen_ai.usage.input_tokens"],
        "gen_ai.usage.output_tokens": chat.attributes["gen_ai.usage.output_tokens"],
        "gen_ai.conversation.id": root.attributes["gen_ai.conversation.id"],
    }
    assert str(chat.attributes["gen_ai.response.id"]).startswith("chatcmpl-")
    assert {
        k: v for k, v in pending.attributes.items() if k.startswith(("gen_ai.tool", "plait.mcp"))
    } == {
        "gen_ai.tool.name": "release__pending_changes",
        "gen_ai.tool.call.id": "call_changes",
        "gen_ai.tool.type": "extension",
        "plait.mcp.server": "release",
    }
    assert pending.attributes["plait.tool.outcome"] == "ok"
    assert create.attributes["gen_ai.tool.type"] == "function"
    for span in sent_live + sent_later:  # content is off by default
        assert not set(CONTENT_KEYS) & set(span.attributes), span.name


@pytest.mark.usefixtures("demo_here")
def test_the_content_switch_puts_messages_arguments_and_results_on_the_spans(cli: Cli) -> None:
    session = only_session(cli)
    switch = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    spans = {s["name"] + s["spanId"]: s for s in traced_json(cli, "trace", session, env=switch)}
    attributes = {
        key: {a["key"]: a["value"] for a in span.get("attributes", [])}
        for key, span in spans.items()
    }
    [first] = [
        a
        for a in attributes.values()
        if a.get("gen_ai.operation.name") == {"stringValue": "chat"}
        and len(json.loads(a["gen_ai.input.messages"]["stringValue"])) == 1
        and "demo's root agent" in a["gen_ai.system_instructions"]["stringValue"]
    ]
    sent = json.loads(first["gen_ai.input.messages"]["stringValue"])
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    replied = json.loads(first["gen_ai.output.messages"]["stringValue"])
    assert replied[0]["parts"][-1]["name"] == "conv_create"
    [tool] = [
        a
        for a in attributes.values()
        if a.get("gen_ai.tool.name") == {"stringValue": "release__pending_changes"}
    ]
    assert (
        "- crash recovery runs read-only calls again"
        in tool["gen_ai.tool.call.result"]["stringValue"]
    )
    assert tool["gen_ai.tool.call.arguments"] == {"stringValue": "{}"}
    # Without the switch, --json prints the same spans without their content.
    plain = traced_json(cli, "trace", session)
    assert sorted(s["spanId"] for s in plain) == sorted(s["spanId"] for s in spans.values())


def test_a_log_written_before_spans_existed_traces(cli: Cli, tmp_path: Path) -> None:
    copy = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, copy)
    where = ("--store", str(copy))
    session = only_session(cli, *where)
    spans = traced_json(cli, *where, "trace", session)
    names = sorted(s["name"] for s in spans)
    assert names.count("invoke_agent root") >= 1
    assert any(name.startswith("chat ") for name in names)
    assert any(name.startswith("execute_tool ") for name in names)
    ids = [s["spanId"] for s in spans]
    assert len(ids) == len(set(ids))
    assert traced_json(cli, *where, "trace", session) == spans  # the same, every time


def test_content_a_storage_policy_kept_out_of_the_log_is_out_of_the_spans(
    cli: Cli, tmp_path: Path
) -> None:
    script = [
        Step(text=f"Looking {MARKER} up.", tool_calls=[call("lookup", person=MARKER)]),
        Step(text=f"{MARKER} lives at 12 Elm Street."),
    ]

    def lookup(person: str) -> str:
        """Find where a person lives."""
        return f"{person}: 12 Elm Street"

    cli.store.parent.mkdir()
    with SqliteStore(cli.store) as store:
        session = record_session(
            store,
            script,
            [f"Where does {MARKER} live?"],
            "private",
            tools=[lookup],
            storage_policy=StoragePolicy.parse("headers_only"),
        )
    spans = traced_json(cli, "trace", session, "--content")
    assert sorted(s["name"].split()[0] for s in spans) == [
        "chat",
        "chat",
        "execute_tool",
        "invoke_agent",
    ]
    assert MARKER not in json.dumps(spans)


@pytest.mark.usefixtures("demo_here")
def test_trace_says_what_it_needs(cli: Cli) -> None:
    session = only_session(cli)
    nowhere = cli("trace", session)
    assert nowhere.returncode == 1
    assert nowhere.stderr == (
        "plait: plait trace: where to? give --endpoint URL, [telemetry] otlp_endpoint or "
        "OTEL_EXPORTER_OTLP_ENDPOINT, or --json to print the spans\n"
    )
    with OtlpReceiver() as down:
        down.status = 503
        refused = cli("trace", session, "--endpoint", down.url)
    assert refused.returncode == 1
    assert refused.stderr == (
        f"plait: {down.url}/v1/traces: the backend did not take spans 1-9 of 9\n"
    )
    grpc = cli(
        "trace",
        session,
        "--endpoint",
        "http://127.0.0.1:4317",
        env={"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    )
    assert grpc.returncode == 1
    assert grpc.stderr == (
        "plait: plait trace: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: plait exports OTLP over "
        "http/protobuf only; set it to http/protobuf and give the collector's HTTP endpoint "
        "(port 4318)\n"
    )
    recent = traced_json(cli, "trace", "--since", "1h")
    assert len(recent) == 9
    assert traced_json(cli, "trace", "--since", "2000-01-01T00:00:00Z") == recent
    gone = cli("trace", "--since", "yesterday", "--json")
    assert gone.returncode == 2 and "'yesterday': not a time" in gone.stderr


@pytest.mark.usefixtures("demo_here")
def test_without_the_sdk_an_endpoint_gives_one_line_naming_the_extra(cli: Cli) -> None:
    session = only_session(cli)
    hidden = cli.cwd / "hidden"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import sys\nsys.modules['opentelemetry.sdk'] = None\n"
    )
    env = {"PYTHONPATH": f"{hidden}:{cli.env.get('PYTHONPATH', '')}"}
    traced = cli("trace", session, "--json", env=env)
    assert traced.returncode == 1
    assert traced.stderr.startswith(
        "plait: exporting telemetry needs the OpenTelemetry SDK and OTLP exporter: "
        "pip install 'plait[otel]'"
    )
    ran = cli("demo", env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert ran.returncode == 0, ran.stderr
    warned = [line for line in ran.stderr.splitlines() if "telemetry" in line]
    assert len(warned) == 1 and "pip install 'plait[otel]'" in warned[0], ran.stderr
    assert "sessions run without it" in warned[0]
