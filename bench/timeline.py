"""Where one durable turn's milliseconds go, thread by thread: a timeline of marks.

Run from the repository root: ``python bench/timeline.py [--turns N] [--store URL]``.

It runs ``N`` plain turns (``session.run``) against a local ``ScriptedModelServer``, with marks
wrapped around the points a turn passes through (the actors' messages, the store's appends, the
HTTP request and its answer, the waiter waking), and prints for each mark its median offset
from ``run()`` being called, the thread it ran on and, for a span, its median length. A dev
tool: the wrapping costs a few microseconds a mark, and the marks name private functions.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from marks import mark, mark_when_fed, marks, on, report, wrap
from model_process import ModelProcess

from plait.actors import ModelClient, ModelSettings, Session
from plait.actors import _conversation as conversation
from plait.actors import _transport as transport
from plait.actors._conversation import Conversation
from plait.events import EventStore, TaskCompleted
from plait.runtime import Runtime, RuntimeSettings
from plait.runtime._acks import Ack
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

ANSWER = "Escaped quotes now survive the tokenizer; a regression test covers it, all 119 pass."
MODEL, WARM = "scripted-model", 5


def instrument() -> None:
    def message(_self: Any, msg: Any) -> str:
        return f"{type(_self).__name__} handles {type(msg).__name__}"

    def appended(_self: Any, stream: str, items: Any, *args: Any, **kwargs: Any) -> str:
        names = [type(getattr(i, "body", i)).__name__ for i in items]
        return "store.append " + "+".join(names)

    def prepared(_self: Any, stream: str, prepared: Any, **kwargs: Any) -> str:
        return "store.append_prepared " + "+".join(type(e.body).__name__ for e in prepared.events)

    wrap(EventStore, "append_prepared", prepared)
    wrap(EventStore, "prepare", "store.prepare")
    wrap(conversation, "call_model", "call_model")
    wrap(ModelClient, "_body", "ModelClient builds the body (loop)")
    wrap(Session, "on_receive", message)
    wrap(Conversation, "on_receive", message)
    wrap(EventStore, "append", appended)
    wrap(Ack, "__call__", "ack (durable)", span=False)
    wrap(transport._Conn, "send", "HTTP request written", span=False)
    first = {"seen": False}
    data_received = transport._Conn.data_received

    def received(self: Any, data: bytes) -> None:
        if not first["seen"]:
            first["seen"] = True
            mark("HTTP first bytes")
        data_received(self, data)
        if self.done:
            first["seen"] = False
            mark("HTTP answer whole")

    transport._Conn.data_received = received  # type: ignore[method-assign]

    mark_when_fed(TaskCompleted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--store", help="a store URL (default: a SQLite file)")
    parser.add_argument("--tool", action="store_true", help="each task calls conv_list first")
    parser.add_argument("--inprocess", action="store_true", help="the model server in this process")
    parser.add_argument("--switch", type=float, help="sys.setswitchinterval, seconds")
    args = parser.parse_args()
    if args.switch:
        import sys

        sys.setswitchinterval(args.switch)
    instrument()
    turns: list[list[tuple[int, str, str]]] = []
    with tempfile.TemporaryDirectory(prefix="plait-timeline-") as name:
        tmp = Path(name)
        answer = Step(text=ANSWER, chunk_chars=5)
        task = [Step(tool_calls=[ScriptedToolCall("conv_list")]), answer] if args.tool else [answer]
        steps = task * (WARM + args.turns)
        serve = ScriptedModelServer if args.inprocess else ModelProcess
        with serve(steps, model=MODEL) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
            with Runtime(
                args.store or tmp / "t.db", RuntimeSettings(model=settings, workdir=tmp)
            ) as runtime:
                session = runtime.start_session()
                for i in range(WARM + args.turns):
                    marks.clear()
                    on[0] = i >= WARM
                    mark("run() called")
                    assert session.run(f"question {i}", timeout=60).ok
                    mark("run() returned")
                    on[0] = False
                    if i >= WARM:
                        turns.append(list(marks))
    what = "turns; median offset from run() of each mark's first time in a turn"
    report(turns, lambda run: run[0][0], what)


if __name__ == "__main__":
    main()
