"""Per-turn wall time of a durable plait turn, beside the ``openai`` SDK making the same requests.

Run from the repository root: ``python bench/turns.py [--quick] [--profile]`` (see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import http.client
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import psycopg
from model_process import ModelProcess
from openai import OpenAI
from report import Line, table

from plait import PlaitError
from plait.actors import ModelSettings
from plait.events import Event, TaskCompleted
from plait.runtime import Runtime, RuntimeSettings
from plait.telemetry import TelemetrySettings
from plait.testing import ScriptedToolCall, Step

ANSWER = "Escaped quotes now survive the tokenizer; a regression test covers it, all 119 pass."
MODEL, WARM = "scripted-model", 3
HISTORY = 100
"""Tasks run in the session before the timed ones of section 1b: 200 messages of history."""
POSTGRES = os.environ.get("PLAIT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
FLOOR = "http.client + msgspec (floor)"
WAITS = {
    "<method 'acquire' of '_thread.lock' objects>",
    "<method 'get' of '_queue.SimpleQueue' objects>",
    "<method 'poll' of 'select.epoll' objects>",
}
Message = dict[str, Any]
Stream = Callable[[list[Message]], Iterable[Any]]  # a request, and its streamed choices


class Shape(msgspec.Struct):
    """What plait sent, so that the baselines send the very same requests."""

    system: Message
    tools: list[Any]
    tool_output: str = ""


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def steps(tasks: int, tool: bool) -> list[Step]:
    answer = Step(text=ANSWER, chunk_chars=5)  # 17 text chunks
    per_task = [Step(tool_calls=[ScriptedToolCall("conv_list")]), answer] if tool else [answer]
    return per_task * tasks


def prompt(i: int) -> str:
    return f"Question {i}: what changed in the parser module, and is it tested?"


# --- ours: Runtime on a SqliteStore file, session.run per task --------------------------------


def ours(
    tmp: Path,
    n: int,
    tool: bool,
    name: str,
    *,
    store: str | None = None,
    history: int = 0,
    telemetry: TelemetrySettings | None = None,
) -> tuple[list[float], Shape]:
    """Time ``n`` tasks in one session (on ``store``, by default a SQLite file), after
    ``history`` untimed tasks in it (two messages each); ``telemetry`` exports it live."""
    off = TelemetrySettings(enabled=False)
    with ModelProcess(steps(WARM + history + n, tool), model=MODEL) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
        where = store or tmp / f"{name}.db"
        with Runtime(
            where, RuntimeSettings(model=settings, workdir=tmp, telemetry=telemetry or off)
        ) as runtime:
            warm = runtime.start_session()
            for i in range(WARM):
                assert warm.run(prompt(i), timeout=60).ok
            session = runtime.start_session()
            for i in range(history):
                assert session.run(prompt(i), timeout=60).ok
            if runtime.telemetry is not None:  # the untimed tasks' spans are not the timed ones'
                assert runtime.telemetry.flush(), "the receiver did not take the spans"
            times: list[float] = []
            cpu = time.process_time()
            for i in range(n):
                start = time.perf_counter()
                outcome = session.run(prompt(i), timeout=60)
                times.append(time.perf_counter() - start)
                assert outcome.ok, outcome
            CPU[name] = (time.process_time() - cpu) / n
        first, second = server.requests(2)
        output = second["messages"][-1].get("content", "") if tool else ""
        return times, Shape(first["messages"][0], first.get("tools", []), output)


# --- raw: the same requests from a plain loop, by the SDK or by http.client + msgspec ---------


def raw_tasks(stream: Stream, shape: Shape, n: int) -> list[float]:
    """Time ``n`` tasks, each a model request (two with a tool call), the history growing."""
    messages: list[Message] = [shape.system]
    times: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        messages.append({"role": "user", "content": prompt(i)})
        text, calls = gather(stream(messages))
        if calls:  # one: conv_list
            [(c, f, a)] = calls
            wire = [{"id": c, "type": "function", "function": {"name": f, "arguments": a}}]
            messages.append({"role": "assistant", "content": text or None, "tool_calls": wire})
            messages.append({"role": "tool", "tool_call_id": c, "content": shape.tool_output})
            text, calls = gather(stream(messages))
        messages.append({"role": "assistant", "content": text})
        times.append(time.perf_counter() - start)
    return times


def gather(choices: Iterable[Any]) -> tuple[str, list[list[str]]]:
    """Concatenate the streamed text and tool calls ([id, name, arguments] each)."""
    text: list[str] = []
    calls: list[list[str]] = []
    for choice in choices:
        text.append(choice.delta.content or "")
        for call in choice.delta.tool_calls or ():
            if call.id and call.function:
                calls.append([call.id, call.function.name or "", ""])
            if call.function and call.function.arguments:
                calls[-1][2] += call.function.arguments
    return "".join(text), calls


def sdk_stream(client: OpenAI, tools: list[Any]) -> Stream:
    def stream(messages: list[Message]) -> Iterator[Any]:
        for chunk in client.chat.completions.create(  # type: ignore[call-overload]
            model=MODEL,
            messages=messages,
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        ):
            yield from chunk.choices

    return stream


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _Call(msgspec.Struct):
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_Call] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


def floor_stream(base_url: str, tools: list[Any]) -> Stream:
    """The floor of DESIGN.md: stdlib HTTP, msgspec to encode the body and decode the SSE."""
    url = urlsplit(base_url)
    decode, encode = msgspec.json.Decoder(_Chunk).decode, msgspec.json.Encoder().encode
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
    options = {"include_usage": True}

    conn = http.client.HTTPConnection(url.hostname or "", url.port)  # kept alive

    def stream(messages: list[Message]) -> Iterator[Any]:
        body = {"model": MODEL, "messages": messages, "tools": tools, "stream": True}
        content = encode({**body, "stream_options": options})
        conn.request("POST", f"{url.path}/chat/completions", content, headers)
        response = conn.getresponse()
        for line in response:
            if line.startswith(b"data: {"):
                yield from decode(line[6:]).choices
        response.close()

    return stream


def raw(n: int, tool: bool, shape: Shape, floor: bool, history: int = 0) -> list[float]:
    """The same ``n`` tasks, after the same ``history``, by the SDK or the floor."""
    with ModelProcess(steps(WARM + history + n, tool), model=MODEL) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        make = floor_stream if floor else lambda url, tools: sdk_stream(client, tools)
        stream = make(server.base_url, shape.tools)
        raw_tasks(stream, shape, WARM)
        times = raw_tasks(stream, shape, history + n)[history:]
        client.close()
        return times


# --- output, diagnosis, profile ----------------------------------------------------------------


def turn_lines(ours_s: list[float], raw_s: list[float], raw_name: str) -> list[Line]:
    n, k = len(ours_s), max(1, len(ours_s) // 10)
    stats: list[tuple[str, Callable[[list[float]], float]]] = [
        ("median", statistics.median),
        ("p90", lambda t: statistics.quantiles(t, n=10)[-1]),
        ("p99", lambda t: statistics.quantiles(t, n=100)[-1]),
        (f"median of tasks 1-{k}", lambda t: statistics.median(t[:k])),
        (f"median of tasks {n - k + 1}-{n}", lambda t: statistics.median(t[-k:])),
    ]
    floor = raw_name == FLOOR  # the goals are the floor's: ours within 1.5x, flat
    goals = ("<= 1.50x", "", "", "<= 1.50x", "<= 1.50x") if floor else ("",) * 5
    lines: list[Line] = [(f"raw = {raw_name}:", "", "", "", "")]
    for (label, stat), goal in zip(stats, goals, strict=True):
        a, b = stat(ours_s), stat(raw_s)
        lines.append((f"  {label}, ms", ms(a), ms(b), f"{a / b:.2f}x", goal))
    checked = [stats[0], stats[3], stats[4]]  # the median, the first and the last tasks
    for (label, stat), goal in zip(checked, ("", "", "flat"), strict=True):
        overhead = ms(stat(ours_s) - stat(raw_s))
        lines.append((f"  overhead = ours - raw, {label}", overhead, "", "", goal))
    return lines


def diagnose(tmp: Path, n: int) -> None:
    """Median time from submit to the first of each event, and what store.append costs."""
    with ModelProcess(steps(WARM + n, False), model=MODEL) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
        with Runtime(tmp / "diag.db", RuntimeSettings(model=settings, workdir=tmp)) as runtime:
            store, appends = runtime.store, list[float]()

            def timed(write: Callable[..., Any]) -> Callable[..., Any]:
                def timed_write(*args: Any, **kwargs: Any) -> Any:
                    start = time.perf_counter()
                    try:
                        return write(*args, **kwargs)
                    finally:
                        appends.append(time.perf_counter() - start)

                return timed_write

            store.append = timed(store.append)  # type: ignore[method-assign]
            if hasattr(store, "append_prepared"):  # not in an older plait
                store.append_prepared = timed(store.append_prepared)  # type: ignore[method-assign]
            warm = runtime.start_session()
            for i in range(WARM):
                assert warm.run(prompt(i), timeout=60).ok
            session = runtime.start_session()
            appends.clear()
            marks: dict[str, list[float]] = {}
            for i in range(n):
                with session.subscribe() as feed:
                    start = time.perf_counter()
                    session.submit(prompt(i))
                    seen: set[str] = set()
                    while (item := feed.get(timeout=60)) is not None:
                        name = type(item.body if isinstance(item, Event) else item).__name__
                        if name not in seen:
                            seen.add(name)
                            marks.setdefault(name, []).append(time.perf_counter() - start)
                        if isinstance(item, Event) and isinstance(item.body, TaskCompleted):
                            break
    medians = sorted((statistics.median(t), name) for name, t in marks.items())
    lines: list[Line] = [(f"submit -> first {name}", ms(t), "", "", "") for t, name in medians]
    lines += [
        ("appends (store.append, append_prepared) per turn", f"{len(appends) / n:.1f}", "", "", ""),
        ("an append, median ms", ms(statistics.median(appends)), "", "", ""),
        ("appends, total ms per turn", ms(sum(appends) / n), "", "", ""),
    ]
    table(f"3. where one turn's time goes (ours, {n} turns, medians)", lines)


def profile(tmp: Path, n: int) -> None:
    """cProfile ``n`` turns of ours in every thread but the model server's."""
    profilers: list[cProfile.Profile] = []

    def boot(*_: Any) -> None:
        sys.setprofile(None)
        name = threading.current_thread().name
        if not name.startswith("ScriptedModelServer") and "process_request" not in name:
            profilers.append(profiler := cProfile.Profile())
            profiler.enable()

    threading.setprofile(boot)
    main_thread = cProfile.Profile()
    main_thread.enable()
    try:
        ours(tmp, n, False, "profile")
    finally:
        main_thread.disable()
        threading.setprofile(None)
    stats = pstats.Stats(main_thread).add(*profilers)
    for key in [key for key in stats.stats if key[2] in WAITS]:  # type: ignore[attr-defined]
        del stats.stats[key]  # type: ignore[attr-defined]
    stats.total_tt = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    print(f"\n-- cProfile of {n} turns of ours, all threads but the server's, without")
    print("   the blocking waits (lock, queue, epoll): top 30 by own time")
    stats.sort_stats("tottime").print_stats(30)


def more_turns(tmp: Path, n: int) -> None:
    """The plain turn on PostgreSQL, and after 200 messages of history, beside the floor."""
    ours_s, shape = ours(tmp, n, False, "history", history=HISTORY)
    lines = turn_lines(ours_s, raw(n, False, shape, floor=True, history=HISTORY), FLOOR)
    table(f"1b. the plain turn after {2 * HISTORY} messages of history, {n} tasks", lines,
          "ours: Runtime on SQLite (WAL, synchronous=FULL), session.run")  # fmt: skip
    schema = f"plait_bench_{uuid.uuid4().hex[:10]}"
    try:
        ours_s, shape = ours(tmp, n, False, "pg", store=f"{POSTGRES}?schema={schema}")
    except PlaitError as exc:
        print(f"\n1c. the plain turn on PostgreSQL: not run ({exc})")
        return
    finally:
        with contextlib.suppress(psycopg.Error), psycopg.connect(POSTGRES, autocommit=True) as db:
            db.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    lines = turn_lines(ours_s, raw(n, False, shape, floor=True), FLOOR)
    table(f"1c. the plain turn on PostgreSQL, {n} in one session", lines,
          f"ours: Runtime on PostgresStore ({POSTGRES}), session.run")  # fmt: skip


CPU: dict[str, float] = {}
"""CPU seconds per timed task of this process (every thread), by run name."""
RUNS = 8
"""Runs of section 1d, half with live export on, half off, alternating."""


def exported(tmp: Path, n: int) -> None:
    """The durable turn with live export to a local OTLP receiver, beside the same turn
    without: ``n`` tasks each, in alternating runs, so both see the same machine."""
    # The receiver the telemetry tests use, in a process of its own, as a backend is.
    receiver = Path(__file__).resolve().parents[1] / "tests" / "otlp_receiver.py"
    for title, history in (("a plain turn", 0), (f"after {2 * HISTORY} messages", HISTORY)):
        off: list[float] = []
        on: list[float] = []
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
        with subprocess.Popen([sys.executable, str(receiver)], **pipes) as backend:
            assert backend.stdin is not None and backend.stdout is not None
            live = TelemetrySettings(endpoint=backend.stdout.readline().strip())
            for run in range(RUNS):  # off, on, off, on...: both see the machine alike
                name, part = f"otel-{history}-{run}", n // (RUNS // 2)
                if run % 2:
                    on += ours(tmp, part, False, name, history=history, telemetry=live)[0]
                else:
                    off += ours(tmp, part, False, name, history=history)[0]
            backend.stdin.close()
            spans = int(backend.stdout.readline())
        lines: list[Line] = []
        for label, stat in (("median", statistics.median), ("p90", _p90)):
            a, b = stat(on), stat(off)
            lines.append((f"  {label}, ms", ms(a), ms(b), f"{a / b:.2f}x", "<= 1.05x"))
        cpu = [statistics.median(CPU[f"otel-{history}-{run}"] for run in range(k, RUNS, 2))
               for k in (1, 0)]  # fmt: skip
        lines.append(("  CPU per task, all threads, ms", ms(cpu[0]), ms(cpu[1]),
                      f"{cpu[0] / cpu[1]:.2f}x", ""))  # fmt: skip
        lines.append(("  spans the receiver got", str(spans), "", "", ""))
        table(f"1d. {title}, live export on (ours) against off (raw), {len(on)} tasks each", lines,
              "ours: Runtime on SQLite with [telemetry] to a local OTLP/HTTP receiver")  # fmt: skip


def _p90(times: list[float]) -> float:
    return statistics.quantiles(times, n=10)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="counts / 10, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile ours once")
    parser.add_argument(
        "--otel", action="store_true", help="only section 1d: live export on against off"
    )
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    turns, tasks = 500 // scale, 200 // scale
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plait-bench-") as name:
        tmp = Path(name)
        if args.otel:
            exported(tmp, turns)
            print(f"\ntotal {time.perf_counter() - started:.0f} s")
            return
        for title, n, tool in (
            (f"1. a plain turn (~20 streamed chunks), {turns} in one session", turns, False),
            (f"2. a task with one conv_list call (2 model requests), {tasks} tasks", tasks, True),
        ):
            ours_s, shape = ours(tmp, n, tool, f"ours-{n}-{tool}")
            sdk_s, floor_s = raw(n, tool, shape, floor=False), raw(n, tool, shape, floor=True)
            lines = turn_lines(ours_s, sdk_s, "the openai SDK, same requests")
            lines += turn_lines(ours_s, floor_s, FLOOR)
            table(title, lines, "ours: Runtime on SQLite (WAL, synchronous=FULL), session.run")
        more_turns(tmp, turns)
        exported(tmp, turns)
        diagnose(tmp, 100 // scale)
        if args.profile:
            profile(tmp, turns)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
