"""Export recorded sessions as OpenTelemetry spans into Arize Phoenix, and read them back.

Run from the repository root: ``python bench/otel.py [--turns N] [--phoenix-venv DIR]``
(see bench/README.md). The first run installs Phoenix into a virtualenv of its own (minutes); later
runs reuse it. Exits 1 if Phoenix holds fewer spans than were sent, or other span ids.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from plait.actors import ModelSettings
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

PHOENIX = "arize-phoenix>=20.26,<21"
VENV = Path(os.environ.get("PLAIT_BENCH_PHOENIX", "~/.cache/plait-bench/phoenix")).expanduser()
"""Where Phoenix is installed, apart from the project's virtualenv (its pins are its own)."""
PROJECT_KEY, DEFAULT_PROJECT = "openinference.project.name", "default"
"""The resource attribute Phoenix files spans under, and its project without one
(``phoenix.utilities.project.get_project_name``)."""
RAW_PROJECT = "plait-bench-raw"
ANSWER = "Escaped quotes now survive the tokenizer; a regression test covers it."
MODEL = "scripted-model"
PLAIT = Path(sys.executable).with_name("plait")


# --- Phoenix: installed once, served on loopback for the run ------------------------------------


def install(venv: Path) -> Path:
    """Return ``venv``'s ``phoenix`` script, installing Phoenix there first if it is not."""
    marker, script = venv / ".plait-bench", venv / "bin" / "phoenix"
    if script.exists() and marker.exists() and marker.read_text() == PHOENIX:
        return script
    # Over a venv left half-made (an install cut short) or of another pin, venv and pip finish
    # or change what is there; the marker is written only once both have.
    print(f"installing {PHOENIX} into {venv} (a few minutes, once) ...", flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, PHOENIX], check=True)
    marker.write_text(PHOENIX)
    print(f"installed in {time.perf_counter() - started:.0f} s", flush=True)
    return script


def free_port() -> int:
    """A TCP port free on every interface now (Phoenix's gRPC server binds all of them)."""
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


class Phoenix:
    """``phoenix serve`` in a child process: SQLite in ``workdir``, HTTP on 127.0.0.1."""

    def __init__(self, script: Path, workdir: Path, ready_timeout: float = 180) -> None:
        self.port, grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "phoenix.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))},
            # The names of phoenix.config (ENV_PHOENIX_WORKING_DIR, _HOST, _PORT, _GRPC_PORT).
            "PHOENIX_WORKING_DIR": str(workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            # No requests to the internet of its own (fonts, telemetry pixels, downloads).
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        env.pop("PYTHONPATH", None)  # the project's paths are no business of Phoenix's
        print(f"starting phoenix serve on {self.url} (working dir {workdir}) ...", flush=True)
        started = time.perf_counter()
        with self.log.open("wb") as log:
            self._child = subprocess.Popen(
                [str(script), "serve"],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the bench is not its own
            )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        version = self.get("/arize_phoenix_version")
        print(f"phoenix {version} answered in {time.perf_counter() - started:.1f} s", flush=True)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._child.poll() is not None:
                raise RuntimeError(f"phoenix exited ({self._child.returncode}): {self.tail()}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response,
            ):
                if response.status == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"phoenix did not answer in {timeout:.0f} s: {self.tail()}")
            time.sleep(0.25)  # a poll interval: what ends the wait is the answer above

    def tail(self, lines: int = 20) -> str:
        """The last lines of Phoenix's own output."""
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def get(self, path: str, **query: Any) -> Any:
        """GET ``path`` from Phoenix's REST API, decoded as JSON (text if it is not)."""
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            return body.decode()

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span Phoenix holds in ``project`` (none if it has no such project yet), read
        with ``GET /v1/projects/{project}/spans``, a page of 1,000 at a time."""
        spans: list[dict[str, Any]] = []
        query: dict[str, Any] = {"limit": 1000, "sort": "id", "order": "asc"}
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans"
        while True:
            try:
                page = self.get(path, **query)
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and not spans:  # made on the first span it files there
                    return []
                raise
            spans += page["data"]
            if not page.get("next_cursor"):
                return spans
            query["cursor"] = page["next_cursor"]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 15 s."""
        if self._child.poll() is not None:
            return
        self._child.terminate()
        try:
            self._child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print("phoenix did not exit on SIGTERM within 15 s: killed", flush=True)
            self._child.kill()
            self._child.wait()


# --- spans: what was sent, what Phoenix holds ---------------------------------------------------


@dataclass
class Sent:
    """The spans of one export, as OTLP JSON gave them."""

    spans: list[dict[str, Any]]
    project: dict[str, str] = field(default_factory=dict)
    """Span id -> the project Phoenix should file it under."""

    @classmethod
    def from_otlp(cls, document: dict[str, Any]) -> Sent:
        sent = cls([])
        for resource_spans in document.get("resourceSpans", []):
            resource = attributes(resource_spans.get("resource", {}).get("attributes", []))
            project = str(resource.get(PROJECT_KEY) or DEFAULT_PROJECT)
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    sent.spans.append(span)
                    sent.project[span["spanId"]] = project
        return sent

    @property
    def ids(self) -> set[str]:
        return {span["spanId"] for span in self.spans}

    @property
    def trace_ids(self) -> list[str]:
        return sorted({span["traceId"] for span in self.spans})


def value(v: dict[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    if "arrayValue" in v:
        return [value(item) for item in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return attributes(v["kvlistValue"].get("values", []))
    if "intValue" in v:
        return int(v["intValue"])  # a string in OTLP JSON (64-bit)
    if "doubleValue" in v:
        return float(v["doubleValue"])
    for kind in ("stringValue", "boolValue", "bytesValue"):
        if kind in v:
            return v[kind]
    return None


def attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP JSON ``KeyValue``s as a dict."""
    return {pair["key"]: value(pair.get("value", {})) for pair in pairs}


def held(phoenix: Phoenix, sent: Sent) -> list[dict[str, Any]]:
    """The spans Phoenix holds in the traces of ``sent``, in the projects they were sent to."""
    traces = set(sent.trace_ids)
    return [
        span
        for project in sorted(set(sent.project.values()))
        for span in phoenix.spans(project)
        if span["context"]["trace_id"] in traces
    ]


def wait_held(phoenix: Phoenix, sent: Sent, timeout: float) -> tuple[list[dict[str, Any]], float]:
    """Poll Phoenix until it holds every span of ``sent`` (its ingestion is asynchronous), or
    ``timeout`` passes; return what it holds and how long that took."""
    started, deadline = time.perf_counter(), time.monotonic() + timeout
    while True:
        spans = held(phoenix, sent)
        if sent.ids <= {span["context"]["span_id"] for span in spans}:
            return spans, time.perf_counter() - started
        if time.monotonic() > deadline:
            return spans, time.perf_counter() - started
        time.sleep(0.2)  # a poll interval: the wait ends on the spans read above


# --- the sessions: recorded by plait, exported by `plait trace` -----------------------------------


def plait(store: Path, *args: str, cwd: Path) -> tuple[str, float]:
    """Run ``plait --store STORE ARGS`` as a user does; return its stdout and wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(PLAIT), "--store", str(store), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"plait {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout, wall


def record_demo(store: Path, cwd: Path) -> str:
    """Record ``plait demo`` into ``store``; return its session id."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(PLAIT), "--store", str(store), "demo"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"plait demo exited {done.returncode}:\n{done.stderr}")
    # It says "session ID (model: scripted, offline)" on stderr first.
    ids = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("session ")]
    if not ids:
        raise RuntimeError(f"plait demo named no session:\n{done.stderr}")
    print(f"recorded plait demo: session {ids[0]} ({time.perf_counter() - started:.1f} s)")
    return ids[0]


def record_plain(store: Path, workdir: Path, turns: int) -> str:
    """Record a session of ``turns`` tasks of one short answer each; return its id."""
    started = time.perf_counter()
    with ScriptedModelServer([Step(text=ANSWER, chunk_chars=20)] * turns) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
        with Runtime(store, RuntimeSettings(model=settings, workdir=workdir)) as runtime:
            session = runtime.start_session()
            for i in range(turns):
                outcome = session.run(f"Question {i}: what changed in the parser?", timeout=60)
                assert outcome.ok, outcome
    print(f"recorded a plain session of {turns} tasks: session {session.session_id} "
          f"({time.perf_counter() - started:.1f} s)")  # fmt: skip
    return session.session_id


# --- the baseline: the same spans made and exported by the SDK in one process --------------------


def sdk_export(url: str, sent: Sent) -> tuple[Sent, float]:
    """Make spans of the names, tree, times and attributes of ``sent`` with the OpenTelemetry
    SDK in this process and export them to ``url`` (project ``RAW_PROJECT``), as a program
    instrumented in process does; return what it sent and the wall time to the last export."""
    resource = Resource.create({"service.name": "plait-bench-raw", PROJECT_KEY: RAW_PROJECT})
    started = time.perf_counter()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{url}/v1/traces")))
    tracer = provider.get_tracer("plait-bench")
    children: dict[str | None, list[dict[str, Any]]] = collections.defaultdict(list)
    ids = sent.ids
    for span in sent.spans:
        parent = span.get("parentSpanId") or None
        children[parent if parent in ids else None].append(span)
    made = Sent([])

    def make(span: dict[str, Any], parent: trace.Span | None) -> None:
        context = trace.set_span_in_context(parent) if parent is not None else None
        ours = tracer.start_span(
            span["name"],
            context=context,
            kind=trace.SpanKind(max(int(span.get("kind", 1)) - 1, 0)),
            attributes=attributes(span.get("attributes", [])),
            start_time=int(span["startTimeUnixNano"]),
        )
        for child in children[span["spanId"]]:
            make(child, ours)
        ours.end(end_time=int(span["endTimeUnixNano"]))
        got, up = ours.get_span_context(), parent and parent.get_span_context()
        span_id = f"{got.span_id:016x}"
        parent_id = f"{up.span_id:016x}" if up else ""
        new = {"traceId": f"{got.trace_id:032x}", "spanId": span_id, "parentSpanId": parent_id}
        made.spans.append({**span, **new})
        made.project[span_id] = RAW_PROJECT

    for root in children[None]:
        make(root, None)
    provider.shutdown()  # exports what is left, and waits for it
    return made, time.perf_counter() - started


# --- the report ---------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    sent: Sent
    held: list[dict[str, Any]]
    export_s: float
    json_s: float
    ingest_s: float
    raw_s: float
    raw_sent: int
    raw_held: int

    @property
    def matched(self) -> int:
        return len(self.sent.ids & {span["context"]["span_id"] for span in self.held})

    @property
    def ok(self) -> bool:
        ids = {span["context"]["span_id"] for span in self.held}
        return bool(self.sent.spans) and ids == self.sent.ids


def kind(name: str) -> str:
    """The operation of a GenAI span name (``chat MODEL`` -> ``chat``)."""
    return name.split(" ", 1)[0]


def report(result: Result) -> None:
    sent, held_ = result.sent, result.held
    print(f"\n== {result.name}")
    rows = [
        ("spans sent (plait trace --json)", str(len(sent.spans))),
        ("spans Phoenix holds in those traces", str(len(held_))),
        ("span ids matched", f"{result.matched} of {len(sent.ids)}"),
        ("parents matched", parents_matched(sent, held_)),
        ("gen_ai.* attributes read back as sent", same_attributes(sent, held_)),
        ("projects", ", ".join(sorted(set(sent.project.values())))),
        ("export wall time (plait trace --endpoint)", f"{result.export_s:.2f} s"),
        ("  plait trace --json, for comparison", f"{result.json_s:.2f} s"),
        ("  the SDK in process, the same spans (raw)", f"{result.raw_s:.2f} s"),
        ("  raw spans Phoenix holds", f"{result.raw_held} of {result.raw_sent}"),
        ("from the export's end to all spans held", f"{result.ingest_s:.2f} s"),
    ]
    width = max(len(label) for label, _ in rows)
    for label, text in rows:
        print(f"  {label.ljust(width)}  {text}")
    sent_names = collections.Counter(span["name"] for span in sent.spans)
    held_names = collections.Counter(span["name"] for span in held_)
    phoenix_kinds = collections.defaultdict(set)  # what Phoenix makes of each (LLM, TOOL, ...)
    for span in held_:
        phoenix_kinds[span["name"]].add(span["span_kind"])
    print("  by span name (sent / held, Phoenix's span kind):")
    for name in sorted(sent_names.keys() | held_names.keys(), key=lambda n: (kind(n), n)):
        kinds = ", ".join(sorted(phoenix_kinds[name]))
        print(f"    {name:<{width - 2}}  {sent_names[name]} / {held_names[name]}, {kinds}")
    traces = sent.trace_ids
    shown = ", ".join(traces[:3]) + (f", ... ({len(traces)} in all)" if len(traces) > 3 else "")
    print(f"  trace ids: {shown}")
    chat = next((span for span in held_ if kind(span["name"]) == "chat"), None)
    if chat is None:
        print("  no chat span held")
        return
    sent_chat = next(s for s in sent.spans if s["spanId"] == chat["context"]["span_id"])
    sent_attributes = attributes(sent_chat.get("attributes", []))
    context = chat["context"]
    print(f"  a chat span as Phoenix returns it: {chat['name']!r}, span id {context['span_id']}, "
          f"kind {chat['span_kind']}, status {chat['status_code']}")  # fmt: skip
    for key, got in sorted(chat["attributes"].items()):
        if key.startswith("gen_ai."):
            mark = "" if sent_attributes.get(key) == got else "  (not as sent)"
            shown = repr(got) if len(repr(got)) <= 100 else f"{repr(got)[:96]} ..."
            print(f"    {key} = {shown}{mark}")


def genai(found: dict[str, Any]) -> dict[str, Any]:
    """The ``gen_ai.*`` attributes of ``found``."""
    return {key: got for key, got in found.items() if key.startswith("gen_ai.")}


def same_attributes(sent: Sent, held_: list[dict[str, Any]]) -> str:
    """How many spans Phoenix returns with the very ``gen_ai.*`` attributes sent."""
    want = {span["spanId"]: genai(attributes(span.get("attributes", []))) for span in sent.spans}
    same = sum(
        1 for span in held_ if want.get(span["context"]["span_id"]) == genai(span["attributes"])
    )
    return f"{same} of {len(want)} spans"


def parents_matched(sent: Sent, held_: list[dict[str, Any]]) -> str:
    want = {span["spanId"]: span.get("parentSpanId") or None for span in sent.spans}
    same = sum(
        1
        for span in held_
        if span["context"]["span_id"] in want
        and want[span["context"]["span_id"]] == (span.get("parent_id") or None)
    )
    return f"{same} of {len(want)}"


# --- main ---------------------------------------------------------------------------------------


def run_session(
    phoenix: Phoenix, store: Path, cwd: Path, name: str, session: str, args: argparse.Namespace
) -> Result:
    """Export ``session`` with ``plait trace`` to Phoenix and read its spans back."""
    content = ["--content"] if args.content else []
    out, json_s = plait(store, "trace", session, "--json", *content, cwd=cwd)
    sent = Sent.from_otlp(json.loads(out))
    _, export_s = plait(store, "trace", session, "--endpoint", phoenix.url, *content, cwd=cwd)
    spans, ingest_s = wait_held(phoenix, sent, args.timeout)
    raw, raw_s = sdk_export(phoenix.url, sent)
    raw_spans, _ = wait_held(phoenix, raw, args.timeout)
    return Result(name, sent, spans, export_s, json_s, ingest_s, raw_s, len(raw.spans),
                  len(raw.ids & {s["context"]["span_id"] for s in raw_spans}))  # fmt: skip


def on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # so that the finally blocks stop Phoenix


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=200, help="tasks in the plain session")
    parser.add_argument("--quick", action="store_true", help="a plain session of 20 tasks")
    parser.add_argument("--phoenix-venv", type=Path, default=VENV, help=f"default {VENV}")
    parser.add_argument("--timeout", type=float, default=60, help="wait for Phoenix to hold all")
    parser.add_argument("--content", action="store_true", help="plait trace --content")
    args = parser.parse_args()
    turns = 20 if args.quick else args.turns
    signal.signal(signal.SIGTERM, on_sigterm)
    script = install(args.phoenix_venv)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="plait-bench-otel-") as name:
        tmp = Path(name)
        (tmp / "phoenix").mkdir()
        store = tmp / "plait.db"
        sessions = [
            ("plait demo", record_demo(store, tmp)),
            (f"a plain session of {turns} tasks", record_plain(store, tmp, turns)),
        ]
        phoenix = Phoenix(script, tmp / "phoenix")
        try:
            for title, session in sessions:
                results.append(run_session(phoenix, store, tmp, title, session, args))
                report(results[-1])
        finally:
            phoenix.stop()
    bad = [r.name for r in results if not r.ok or r.raw_held < r.raw_sent]
    if bad:
        print(f"\nFAIL: Phoenix does not hold every span sent, by the same ids: {', '.join(bad)}")
    else:
        print("\nok: Phoenix holds every span sent, by the same ids")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
