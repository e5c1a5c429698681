"""Where one MCP tool call's milliseconds go, thread by thread: a timeline of marks.

Run from the repository root: ``python bench/mcp_timeline.py [--calls N] [--model-process]``.

It runs the session of ``bench/mcp.py`` (one ``t__echo`` call a turn, stdio, SQLite durable,
the scripted model server in this process unless ``--model-process``)
with marks wrapped around the points a call passes through (the actors' messages, the
journal's records, the effect loop, the MCP client, the stdio pipes) and prints for each mark
its median offset from the ``ToolCallRequested`` record's end, the thread it ran on and
how often it was seen. A dev tool: the wrapping costs a few microseconds a mark, and the
marks name private functions, which change as the code does.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))  # bench/mcp.py is named like the mcp package

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plait.actors.conversation import Conversation
from plait.actors.feed import Feed
from plait.actors.journal import Journal
from plait.actors.mcp import McpServerConfig
from plait.actors.model import ModelSettings
from plait.actors.pool import McpPool
from plait.events.types import Event, ToolCallCompleted, ToolCallRequested
from plait.runtime import Runtime
from plait.testing import ScriptedToolCall, Step

SERVER = Path(__file__).parents[1] / "tests" / "mcp" / "server.py"
WARM = 5

_marks: list[tuple[int, str, str]] = []  # (perf_counter_ns, label, thread name)


def mark(label: str) -> None:
    _marks.append((time.perf_counter_ns(), label, threading.current_thread().name))


def wrap(owner: Any, name: str, label: Callable[..., str | None] | str, span: bool = True) -> None:
    """Put marks around ``owner.name`` (a function or a coroutine function)."""
    import inspect

    inner = getattr(owner, name)
    if inspect.iscoroutinefunction(inner):

        async def amarked(*args: Any, **kwargs: Any) -> Any:
            text = label(*args, **kwargs) if callable(label) else label
            if text:
                mark(text)
            try:
                return await inner(*args, **kwargs)
            finally:
                if span and text:
                    mark(text + " end")

        setattr(owner, name, amarked)
        return

    def marked(*args: Any, **kwargs: Any) -> Any:
        text = label(*args, **kwargs) if callable(label) else label
        if text:
            mark(text)
        try:
            return inner(*args, **kwargs)
        finally:
            if span and text:
                mark(text + " end")

    setattr(owner, name, marked)


def instrument() -> None:
    def message(_self: Any, msg: Any) -> str:
        return f"{type(_self).__name__} handles {type(msg).__name__}"

    def appended(_self: Any, items: Any, *args: Any, **kwargs: Any) -> str:
        names = [type(getattr(i, "body", i)).__name__ for i in items]
        return "record " + "+".join(n for n in names if n != "ModelResponded")

    wrap(Conversation, "on_receive", message)
    wrap(McpPool, "on_receive", message)
    wrap(Journal, "record", appended)

    from mcp.client.session import ClientSession

    from plait.actors.effects import EffectLoop
    from plait.actors.mcp import calls, client, servers, stdio

    wrap(EffectLoop, "submit", "effects.submit")
    wrap(servers.McpServers, "call", "McpServers.call")
    wrap(client.McpConnection, "call", "McpConnection.call")
    wrap(client, "schema_problem", "schema check")
    wrap(ClientSession, "call_tool", "ClientSession.call_tool")
    wrap(ClientSession, "send_request", "send_request")
    wrap(ClientSession, "validate_tool_result", "validate result")
    wrap(calls, "from_mcp_result", "from_mcp_result", span=False)
    client.from_mcp_result = calls.from_mcp_result
    wrap(stdio, "_parse", "stdout line parsed", span=False)
    from anyio._backends import _asyncio as backend

    def sent(_self: Any, data: bytes) -> str | None:
        return "pipe write" if b"tools/call" in data else None

    wrap(backend.StreamWriterWrapper, "send", sent)
    wrap(backend.StreamReaderWrapper, "receive", "pipe read", span=True)

    import plait.testing

    wrap(plait.testing._Handler, "do_POST", "model server do_POST")
    put = Feed.put

    def fed(self: Any, item: Any) -> None:
        if isinstance(item, Event) and isinstance(item.body, ToolCallCompleted):
            mark("feed.put ToolCallCompleted")
        put(self, item)

    Feed.put = fed  # type: ignore[method-assign]


def report(calls: list[list[tuple[int, str, str]]]) -> None:
    offsets: dict[tuple[str, str], list[float]] = defaultdict(list)
    for marks in calls:
        start = next(at for at, label, _ in marks if _asks(label) and label.endswith(" end"))
        seen: set[tuple[str, str]] = set()
        for at, label, thread in marks:
            key = (label, thread.split("-")[0] if thread.startswith("Thread") else thread)
            if key in seen:
                continue
            seen.add(key)
            offsets[key].append((at - start) / 1e6)
    rows = sorted(offsets, key=lambda k: statistics.median(offsets[k]))
    print(f"\n{len(calls)} calls; median offset from the end of the ToolCallRequested record")
    print(f"{'ms':>7}  {'in':>5}  {'thread':<22} mark")
    for key in rows:
        share = len(offsets[key]) / len(calls)
        label, thread = key
        print(f"{statistics.median(offsets[key]):7.3f}  {share:5.0%}  {thread[:22]:<22} {label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--model-process", action="store_true", help="the model server apart")
    args = parser.parse_args()
    import mcp.client.session  # noqa: F401  (instrumented before the runtime starts)

    if "--bare" not in sys.argv:
        instrument()
    n = args.calls
    config = McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"])
    call = Step(tool_calls=[ScriptedToolCall("t__echo", json.dumps({"text": "the quick fox"}))])
    per_call: list[list[tuple[int, str, str]]] = []
    with tempfile.TemporaryDirectory(prefix="plait-timeline-") as name:
        tmp = Path(name)
        steps = [call] * (WARM + n) + [Step(text="done")]
        with _bench().model_server(steps, not args.model_process) as base_url:
            settings = ModelSettings(base_url=base_url, api_key="x", model="scripted")
            with Runtime(
                tmp / "mcp.db", model=settings, workdir=tmp, mcp_servers={"t": config}
            ) as runtime:
                session = runtime.start_session()
                done = 0
                with session.subscribe(transient=False) as feed:
                    session.submit("echo it, many times")
                    while (item := feed.get(timeout=60)) is not None:
                        if isinstance(item, Event) and isinstance(item.body, ToolCallRequested):
                            mark("feed.get ToolCallRequested")
                        elif isinstance(item, Event) and isinstance(item.body, ToolCallCompleted):
                            mark("feed.get ToolCallCompleted")
                            done += 1
                            marks = list(_marks)
                            _marks.clear()
                            if done > WARM:
                                per_call.append(_one_call(marks))
                            if done == WARM + n:
                                break
    report(per_call)


def _one_call(marks: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """The marks from the last ToolCallRequested record on (the call's own)."""
    starts = [i for i, m in enumerate(marks) if _asks(m[1]) and not m[1].endswith(" end")]
    return marks[starts[-1] :] if starts else marks


def _bench() -> Any:
    """bench/mcp.py (named like the mcp package, so loaded by its path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mcp_bench", Path(__file__).with_name("mcp.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _asks(label: str) -> bool:
    return label.startswith("record") and "ToolCallRequested" in label


if __name__ == "__main__":
    main()
