"""How a turn's prompt build time grows with the history.

Run from the repository root: ``python bench/prompt.py [--quick]`` (see bench/README.md).

A conversation gains one message a turn. For each history length, the time to build the
turn's ``messages`` JSON is measured three ways:

- ours: ``PromptView``: each message is encoded once when it is added; a turn copies the
  encoded history once.
- rebuild: convert every message and encode the whole list each turn (with msgspec), as the
  conversation did before and as most peers do;
- json: the same with the standard ``json`` module, as an SDK's request builder does.

Build time should grow as the prompt's bytes do (flat ns per byte), not faster.

Then the same once the runtime's model client has taken another content shape
(docs/models.md#content-shapes): ours builds the prompt in that shape from the view's second
buffer; raw builds it in the session's shape and reshapes it for the request (decodes and
encodes the whole history again), as the client did for every request before.
"""

from __future__ import annotations

import argparse
import json
import time

import msgspec
from report import Line, table

from plait.actors._content_shape import reshaped
from plait.actors._prompt import PromptView
from plait.events import ToolCall
from plait.events.projections import ChatMessage

SYSTEM = "You are a capable assistant working in a session of several conversations."


def message(n: int) -> ChatMessage:
    """A realistic mix: user text, tool calls, tool output, assistant text (~300 bytes)."""
    kind = n % 4
    if kind == 0:
        return ChatMessage("user", f"Step {n}: look at the failing test and tell me why. " * 3)
    if kind == 1:
        call = ToolCall(f"call_{n}", "fs__read_file", json.dumps({"path": f"src/m{n}.py"}))
        return ChatMessage("assistant", None, tool_calls=(call,))
    if kind == 2:
        return ChatMessage(
            "tool", "def f(x):\n    return x * 2\n" * 8, tool_call_id=f"call_{n - 1}"
        )
    return ChatMessage("assistant", f"The test fails because of case {n}; fixed it. " * 3)


def ours(view: PromptView, history: list[ChatMessage]) -> int:
    view.sync(history)
    return len(view.messages(SYSTEM))


def rebuild(history: list[ChatMessage]) -> int:
    wire = [{"role": "system", "content": SYSTEM}, *(m.to_openai() for m in history)]
    return len(msgspec.json.encode(wire))


def stdlib(history: list[ChatMessage]) -> int:
    wire = [{"role": "system", "content": SYSTEM}, *(m.to_openai() for m in history)]
    return len(json.dumps(wire).encode())


def measure(sizes: list[int], turns: int) -> tuple[list[Line], list[Line]]:
    """Per history size: ours beside the msgspec rebuild, and ours beside the json rebuild."""
    against_rebuild: list[Line] = []
    against_json: list[Line] = []
    history: list[ChatMessage] = []
    view = PromptView()
    for size in sizes:
        while len(history) < size - turns:
            history.append(message(len(history)))
        ours(view, history)  # the view caught up with the turns before the measured ones
        timings = {"ours": 0.0, "rebuild": 0.0, "json": 0.0}
        size_bytes = 0
        for _ in range(turns):
            history.append(message(len(history)))
            started = time.perf_counter()
            size_bytes = ours(view, history)
            timings["ours"] += time.perf_counter() - started
            started = time.perf_counter()
            rebuild(history)
            timings["rebuild"] += time.perf_counter() - started
            started = time.perf_counter()
            stdlib(history)
            timings["json"] += time.perf_counter() - started
        per = {k: v / turns for k, v in timings.items()}

        def cell(name: str, per: dict[str, float] = per, size: int = size_bytes) -> str:
            return f"{per[name] * 1e6:.0f} us ({per[name] * 1e9 / size:.2f} ns/B)"

        label = f"{size:>6} messages, {size_bytes / 1e6:.2f} MB"
        ratio = f"{per['rebuild'] / per['ours']:.0f}x"
        against_rebuild.append((label, cell("ours"), cell("rebuild"), ratio, "flat ns/B"))
        ratio = f"{per['json'] / per['ours']:.0f}x"
        against_json.append((label, cell("ours"), cell("json"), ratio, "flat ns/B"))
    return against_rebuild, against_json


def shaped(sizes: list[int], turns: int) -> list[Line]:
    """Per history size: a protocol-2 session's prompt with no ``content`` key on its
    tool-call messages, built in that shape beside built and then reshaped."""
    lines: list[Line] = []
    history: list[ChatMessage] = []
    view = PromptView(strict=True, empty="empty")
    for size in sizes:
        while len(history) < size - turns:
            history.append(message(len(history)))
        view.sync(history)
        view.messages(SYSTEM, shape="omitted")  # the switch: the second buffer is built once
        timings = {"ours": 0.0, "raw": 0.0}
        size_bytes = 0
        for _ in range(turns):
            history.append(message(len(history)))
            started = time.perf_counter()
            view.sync(history)
            size_bytes = len(view.messages(SYSTEM, shape="omitted"))
            timings["ours"] += time.perf_counter() - started
            started = time.perf_counter()
            reshaped(view.messages(SYSTEM), "omitted")
            timings["raw"] += time.perf_counter() - started
        per = {k: v / turns for k, v in timings.items()}
        ours, raw = (f"{per[k] * 1e6:.0f} us ({per[k] * 1e9 / size_bytes:.2f} ns/B)" for k in per)
        label = f"{size:>6} messages, {size_bytes / 1e6:.2f} MB"
        lines.append((label, ours, raw, f"{per['raw'] / per['ours']:.0f}x", "flat ns/B"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and turns")
    args = parser.parse_args()
    sizes = [100, 1000, 5000] if args.quick else [100, 1000, 10000, 50000]
    turns = 10 if args.quick else 30
    against_rebuild, against_json = measure(sizes, turns)
    table(
        "prompt build per turn, history growing one message a turn",
        against_rebuild,
        "raw = convert and encode the whole history each turn with msgspec (as before)",
    )
    table(
        "the same, against the standard json module",
        against_json,
        "raw = convert and json.dumps the whole history each turn (as SDK request builders do)",
    )
    table(
        "the same, the model client sending another content shape",
        shaped(sizes, turns),
        "raw = build in the session's shape, then reshape the whole history (as before)",
    )


if __name__ == "__main__":
    main()
