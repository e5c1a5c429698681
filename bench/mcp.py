"""What a tool call through plait costs beyond the MCP call itself.

Run from the repository root: ``python bench/mcp.py [--quick] [--model-process]`` (see
bench/README.md).
"""

from __future__ import annotations

import sys

# This file is named like the ``mcp`` package: look for modules in bench/ last, not first.
sys.path.append(sys.path.pop(0))

import argparse
import asyncio
import contextlib
import itertools
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
from report import Line, table

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.events import Event, ToolCallCompleted, ToolCallRequested
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

SERVER = Path(__file__).parents[1] / "tests" / "mcp" / "server.py"
ARGS = {"text": "the quick brown fox"}
WARM = 5
ROUNDS = 5


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def direct(n: int) -> list[float]:
    """``ClientSession.call_tool`` in a loop on the same stdio server."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def run() -> list[float]:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            times: list[float] = []
            for i in range(WARM + n):
                start = time.perf_counter()
                result = await session.call_tool("echo", ARGS)
                if i >= WARM:
                    times.append(time.perf_counter() - start)
                assert not result.is_error
            return times

    return asyncio.run(run())


@contextlib.contextmanager
def model_server(steps: list[Step], inprocess: bool) -> Iterator[str]:
    """Serve ``steps`` and yield the base URL: from this process, or from a child process
    (``inprocess`` false), as a real model server is; then it holds no interpreter lock of
    ours, but takes a core of this 2-core machine's."""
    if inprocess:
        with ScriptedModelServer(steps) as server:
            yield server.base_url
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(msgspec.json.encode(steps) + b"\n")
    child.stdin.flush()
    try:
        yield child.stdout.readline().decode().strip()
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def serve() -> None:
    """The child of ``model_server``: serve the steps read from stdin until it closes."""
    steps = msgspec.json.decode(sys.stdin.buffer.readline(), type=list[Step])
    with ScriptedModelServer(steps) as server:
        print(server.base_url, flush=True)
        sys.stdin.buffer.read()


def ours(tmp: Path, n: int, inprocess: bool = True) -> tuple[list[float], list[float]]:
    """From the model's call recorded to its output recorded, seen by a live subscriber.

    That span holds the call's dispatch, the MCP call on the effect loop, and the durable
    commit of ``ToolCallCompleted``. Also returned: the whole turn (the model asks, the
    tool runs, the next request goes out), from one ``ToolCallRequested`` to the next.
    """
    config = McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])
    call = Step(tool_calls=[ScriptedToolCall("t__echo", json.dumps(ARGS))])
    with model_server([call] * (WARM + n) + [Step(text="done")], inprocess) as base_url:
        settings = ModelSettings(base_url=base_url, api_key="x", model="scripted")
        with Runtime(
            tmp / "mcp.db", RuntimeSettings(model=settings, workdir=tmp, mcp_servers={"t": config})
        ) as runtime:
            session = runtime.start_session()
            asked: list[float] = []
            answered: list[float] = []
            with session.subscribe(transient=False) as feed:
                session.submit("echo it, many times")
                while (item := feed.get(timeout=60)) is not None:
                    if isinstance(item, Event) and isinstance(item.body, ToolCallRequested):
                        asked.append(time.perf_counter())
                    elif isinstance(item, Event) and isinstance(item.body, ToolCallCompleted):
                        assert item.body.outcome == "ok", item.body
                        answered.append(time.perf_counter())
                        if len(answered) == WARM + n:
                            break
    calls = [b - a for a, b in zip(asked, answered, strict=True)][WARM:]
    turns = [b - a for a, b in itertools.pairwise(asked)][WARM:]
    return calls, turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50 calls instead of 500")
    parser.add_argument(
        "--model-process", action="store_true", help="the scripted model server in a child process"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    n = 50 if args.quick else 500
    started = time.perf_counter()
    ours_calls, ours_turns, raw = list[float](), list[float](), list[float]()
    # Ours and raw take turns, a fifth of the calls each time, so that both meet the machine
    # in the same states (one after the other, they differed by up to half a millisecond).
    with tempfile.TemporaryDirectory(prefix="plait-bench-") as name:
        for round_ in range(ROUNDS):
            workdir = Path(name) / str(round_)
            workdir.mkdir()
            calls, turns = ours(workdir, n // ROUNDS, not args.model_process)
            ours_calls += calls
            ours_turns += turns
            raw += direct(n // ROUNDS)
    a, b = statistics.median(ours_calls), statistics.median(raw)
    lines: list[Line] = [("median, ms", ms(a), ms(b), f"{a / b:.2f}x", "")]
    for label, q in (("p90, ms", 10), ("p99, ms", 100)):
        p, r = statistics.quantiles(ours_calls, n=q)[-1], statistics.quantiles(raw, n=q)[-1]
        lines.append((label, ms(p), ms(r), f"{p / r:.2f}x", ""))
    lines += [
        ("overhead = ours - raw, median, ms", ms(a - b), "", "", "<= 1 ms"),
        (
            "whole tool turn (call + next model request), ms",
            ms(statistics.median(ours_turns)),
            "",
            "",
            "",
        ),
    ]
    table(
        f"a tool call (echo over stdio), {n} calls",
        lines,
        "ours: Runtime on SQLite (WAL, synchronous=FULL): ToolCallRequested seen -> "
        "ToolCallCompleted seen; raw: ClientSession.call_tool; model server "
        + ("in a process of its own" if args.model_process else "in this process"),
    )
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
