"""Per-turn wall time of a durable plait turn, beside the ``openai`` SDK making the same requests.

Run from the repository root: ``python bench/turns.py [--quick] [--profile]`` (see README.md).
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
from openai import OpenAI

from plait.actors.model import ModelSettings
from plait.events.types import Event, TaskCompleted
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

ANSWER = "Escaped quotes now survive the tokenizer; a regression test covers it, all 119 pass."
MODEL, WARM = "scripted-model", 3
Line = tuple[str, str, str, str, str]
Message = dict[str, Any]
Calls = list[list[str]]  # [id, name, arguments] per tool call
Complete = Callable[[list[Message]], tuple[str, Calls]]


class Shape(msgspec.Struct):
    """What plait sent, so that the baselines send the very same requests."""

    system: Message
    tools: list[Any]
    tool_output: str = ""


def table(title: str, lines: list[Line], note: str = "") -> None:
    """Print ``lines`` as aligned columns under a section header (and a note)."""
    rows = [("", "ours", "raw", "ratio", "goal"), *lines]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    print(f"\n== {title}" + (f"\n   {note}" if note else ""))
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  " + " | ".join(cells).rstrip())


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def steps(tasks: int, tool: bool) -> list[Step]:
    answer = Step(text=ANSWER, chunk_chars=5)  # 17 text chunks
    per_task = [Step(tool_calls=[ScriptedToolCall("conv_list")]), answer] if tool else [answer]
    return per_task * tasks


def prompt(i: int) -> str:
    return f"Question {i}: what changed in the parser module, and is it tested?"


# --- ours: Runtime on a SqliteStore file, session.run per task --------------------------------


def ours(tmp: Path, n: int, tool: bool, name: str) -> tuple[list[float], Shape]:
    with ScriptedModelServer(steps(WARM + n, tool), model=MODEL) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
        with Runtime(tmp / f"{name}.db", model=settings, workdir=tmp) as runtime:
            warm = runtime.start_session()
            for i in range(WARM):
                assert warm.run(prompt(i), timeout=60).ok
            session = runtime.start_session()
            times: list[float] = []
            for i in range(n):
                start = time.perf_counter()
                outcome = session.run(prompt(i), timeout=60)
                times.append(time.perf_counter() - start)
                assert outcome.ok, outcome
        first, second = server.requests[0].body, server.requests[1].body
        output = second["messages"][-1].get("content", "") if tool else ""
        return times, Shape(first["messages"][0], first.get("tools", []), output)


# --- raw: the same requests from a plain loop, by the SDK or by http.client + msgspec ---------


def raw_tasks(complete: Complete, shape: Shape, n: int) -> list[float]:
    """Time ``n`` tasks, each a model request (two with a tool call), the history growing."""
    messages: list[Message] = [shape.system]
    times: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        messages.append({"role": "user", "content": prompt(i)})
        text, calls = complete(messages)
        if calls:
            wire = [{"id": c, "type": "function", "function": {"name": f, "arguments": a}}]
            messages.append({"role": "assistant", "content": text or None, "tool_calls": wire})
            messages += [{"role": "tool", "tool_call_id": c, "content": shape.tool_output}]
            text, calls = complete(messages)
        messages.append({"role": "assistant", "content": text})
        times.append(time.perf_counter() - start)
    return times


def sdk_complete(client: OpenAI, tools: list[Any]) -> Complete:
    def complete(messages: list[Message]) -> tuple[str, Calls]:
        text: list[str] = []
        calls: Calls = []
        stream = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for call in choice.delta.tool_calls or ():
                    if call.id and call.function:
                        calls.append([call.id, call.function.name or "", ""])
                    if call.function and call.function.arguments:
                        calls[-1][2] += call.function.arguments
        return "".join(text), calls

    return complete


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


def floor_complete(base_url: str, tools: list[Any]) -> Complete:
    """The floor of DESIGN.md: stdlib HTTP, msgspec to encode the body and decode the SSE."""
    url = urlsplit(base_url)
    decode, encode = msgspec.json.Decoder(_Chunk).decode, msgspec.json.Encoder().encode
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
    opts = {"include_usage": True}

    def complete(messages: list[Message]) -> tuple[str, Calls]:
        body = {"model": MODEL, "messages": messages, "tools": tools, "stream": True}
        conn = http.client.HTTPConnection(url.hostname or "", url.port)
        conn.request("POST", f"{url.path}/chat/completions", encode({**body, "stream_options": opts}), headers)
        text: list[str] = []
        calls: Calls = []
        for line in conn.getresponse():
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            for choice in decode(line[6:]).choices:
                text.append(choice.delta.content or "")
                for call in choice.delta.tool_calls or ():
                    if call.id and call.function:
                        calls.append([call.id, call.function.name or "", ""])
                    if call.function and call.function.arguments:
                        calls[-1][2] += call.function.arguments
        conn.close()
        return "".join(text), calls

    return complete


def raw(n: int, tool: bool, shape: Shape, floor: bool) -> list[float]:
    with ScriptedModelServer(steps(WARM + n, tool), model=MODEL) as server:
        client = OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        complete = (
            floor_complete(server.base_url, shape.tools)
            if floor
            else sdk_complete(client, shape.tools)
        )
        raw_tasks(complete, shape, WARM)
        times = raw_tasks(complete, shape, n)
        client.close()
        return times
