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
import tempfile
from pathlib import Path
from typing import Any

from marks import mark, mark_when_fed, marks, report, wrap

from plait.actors import Journal, McpPool, ModelSettings
from plait.actors._conversation import Conversation
from plait.actors.mcp import McpServerConfig
from plait.events import Event, ToolCallCompleted, ToolCallRequested
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedToolCall, Step

SERVER = Path(__file__).parents[1] / "tests" / "mcp" / "server.py"
WARM = 5


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

    from plait.actors import EffectLoop
    from plait.actors.mcp import _calls as calls
    from plait.actors.mcp import _client as client
    from plait.actors.mcp import _servers as servers
    from plait.actors.mcp import _stdio as stdio

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
    mark_when_fed(ToolCallCompleted)


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
                tmp / "mcp.db",
                RuntimeSettings(model=settings, workdir=tmp, mcp_servers={"t": config}),
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
                            made = list(marks)
                            marks.clear()
                            if done > WARM:
                                per_call.append(_one_call(made))
                            if done == WARM + n:
                                break
    what = "calls; median offset from the end of the ToolCallRequested record"
    report(per_call, _start, what)


def _start(run: list[tuple[int, str, str]]) -> int:
    return next(at for at, label, _ in run if _asks(label) and label.endswith(" end"))


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
