"""Marks for the timelines of ``bench/timeline.py`` and ``bench/mcp_timeline.py``.

A mark is ``(perf_counter_ns, label, thread name)``; ``wrap`` puts marks around a function or
coroutine function; ``report`` prints, for each mark, its median offset from a start in each
run, the thread it ran on, and in how many runs it was seen. Dev tools: the wrapping costs a
few microseconds a mark, and the marks name private functions, which change as the code does.
"""

from __future__ import annotations

import inspect
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from plait.actors import Feed
from plait.events import Event

Mark = tuple[int, str, str]

marks: list[Mark] = []
"""The marks made since the caller last cleared them."""
on = [True]
"""Whether ``mark`` keeps anything (``on[0]``)."""


def mark(label: str) -> None:
    if on[0]:
        marks.append((time.perf_counter_ns(), label, threading.current_thread().name))


def wrap(owner: Any, name: str, label: Callable[..., str | None] | str, span: bool = True) -> None:
    """Put marks around ``owner.name``: ``label`` (or ``label(*args)``; ``None``: no mark) at
    its start and, for a span, ``label + " end"`` at its end. Nothing if it has no such name
    (an older plait)."""
    inner = getattr(owner, name, None)
    if inner is None:
        return

    def begin(*args: Any, **kwargs: Any) -> str | None:
        text = label(*args, **kwargs) if callable(label) else label
        if text:
            mark(text)
        return text

    def end(text: str | None) -> None:
        if span and text:
            mark(text + " end")

    if inspect.iscoroutinefunction(inner):

        async def amarked(*args: Any, **kwargs: Any) -> Any:
            text = begin(*args, **kwargs)
            try:
                return await inner(*args, **kwargs)
            finally:
                end(text)

        setattr(owner, name, amarked)
        return

    def marked(*args: Any, **kwargs: Any) -> Any:
        text = begin(*args, **kwargs)
        try:
            return inner(*args, **kwargs)
        finally:
            end(text)

    setattr(owner, name, marked)


def mark_when_fed(kind: type) -> None:
    """Mark ``feed.put KIND`` when an event of ``kind`` reaches a feed."""
    put = Feed.put

    def fed(self: Any, item: Any) -> None:
        if isinstance(item, Event) and isinstance(item.body, kind):
            mark(f"feed.put {kind.__name__}")
        put(self, item)

    Feed.put = fed  # type: ignore[method-assign]


def report(runs: list[list[Mark]], start: Callable[[list[Mark]], int], what: str) -> None:
    """Print each mark's median offset from ``start(run)`` (ns) over ``runs`` (its first time
    in each run), its thread, and the share of runs it was seen in."""
    offsets: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in runs:
        origin = start(run)
        seen: set[tuple[str, str]] = set()
        for at, label, thread in run:
            key = (label, thread.split("-")[0] if thread.startswith("Thread") else thread)
            if key not in seen:
                seen.add(key)
                offsets[key].append((at - origin) / 1e6)
    print(f"\n{len(runs)} {what}")
    print(f"{'ms':>7}  {'in':>5}  {'thread':<22} mark")
    for key in sorted(offsets, key=lambda k: statistics.median(offsets[k])):
        share = len(offsets[key]) / len(runs)
        label, thread = key
        print(f"{statistics.median(offsets[key]):7.3f}  {share:5.0%}  {thread[:22]:<22} {label}")
