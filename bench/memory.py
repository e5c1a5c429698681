"""Peak memory for one large item on its way to the store: a prompt, a tool result, a resume.

Run from the repository root: ``python bench/memory.py [--quick] [--trace] [--wire responses]``
(see bench/README.md).

Each case runs in a fresh Python process (so one case's peak is not another's), on a SQLite
store in a temporary directory, against a ``ScriptedModelServer`` in a process of its own (its
copy of the request is not ours). The process warms up first (imports, a small task), then
reads its resident set (the baseline) and resets its peak (``/proc/self/clear_refs``), runs the
case, and reads the peak (``VmHWM``):

- prompt: one task whose input is a 50 MB text; the model answers "ok".
- tool: one task whose model calls a function tool that returns 20 MB of text, then answers.
- resume: a new process opens the store of the prompt case, resumes that session (its
  history holds the 50 MB message) and runs one more small task in it.

The goal for each: peak <= baseline + 3 x the item. ``--trace`` also prints, per case, the
lines of plait that held the most memory at the peak (tracemalloc; slower). ``--wire
responses`` runs the cases on the Responses API (docs/models.md#wires).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import Line, table

MB = 1 << 20
WORDS = "the quick brown fox jumps over the lazy dog and then it rests a while. "


def big_text(size: int) -> str:
    """``size`` bytes of ASCII text (words, not one repeated byte)."""
    whole, rest = divmod(size, len(WORDS))
    return "".join([WORDS] * whole + [WORDS[:rest]])  # one allocation of the result


def status(field: str) -> int:
    """A ``/proc/self/status`` figure, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak() -> None:
    """Start ``VmHWM`` again from the current resident set."""
    Path("/proc/self/clear_refs").write_text("5")


# --- the model server, in its own process ------------------------------------------------


def serve(case: str) -> None:
    """Serve the case's script; print the base URL; stop when stdin closes."""
    from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

    warm = [Step(text="warm")]
    if case == "tool":
        script = [Step(tool_calls=[ScriptedToolCall("big", "{}")]), Step(text="ok")]
    else:
        script = [Step(text="ok")]
    with ScriptedModelServer([*warm, *script], model="m") as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


class PeakWatcher:
    """Snapshot what is allocated (tracemalloc) each time the traced total reaches a new high."""

    def __init__(self) -> None:
        import threading
        import tracemalloc

        tracemalloc.start(12)
        self._stop = threading.Event()
        self._best = 0
        self._snapshot: Any = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import tracemalloc

        while not self._stop.wait(0.002):
            current, _ = tracemalloc.get_traced_memory()
            if current > self._best * 1.05 + MB:
                self._best = current
                self._snapshot = tracemalloc.take_snapshot()

    def stop(self) -> list[str]:
        """The largest allocations at the highest total seen, with where they were made."""
        import tracemalloc

        self._stop.set()
        self._thread.join()
        tracemalloc.stop()
        if self._snapshot is None:
            return []
        top = [f"traced at the peak: {self._best / MB:.0f} MB"]
        for stat in self._snapshot.statistics("traceback")[:8]:
            frames = [
                line.strip()
                for line in stat.traceback.format()
                if line.strip().startswith("File") and "site-packages/pykka" not in line
            ]
            where = " <- ".join(f.split("/")[-1] for f in frames[-1:-5:-1])
            top.append(f"{stat.size / MB:7.1f} MB  {where}")
        return top


# --- one case, in its own process --------------------------------------------------------


def run_case(case: str, size: int, db: str, trace: bool, wire: str) -> dict[str, Any]:
    from plait import ModelSettings, Runtime, RuntimeSettings, tool

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", case],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    base_url = server.stdout.readline().strip()

    @tool(read_only=True)
    def big() -> str:
        """Return a large text."""
        return big_text(size)

    settings = ModelSettings(base_url=base_url, api_key="bench", model="m", wire_api=wire)
    try:
        with Runtime(db, RuntimeSettings(model=settings, tools=[big])) as runtime:
            stored = [info.stream for info in runtime.store.streams()]
            session = runtime.start_session()
            assert session.run("warm up", timeout=120).ok
            item = big_text(size) if case == "prompt" else ""
            watcher = PeakWatcher() if trace else None
            baseline = status("VmRSS")
            reset_peak()
            started = time.perf_counter()
            if case == "resume":
                session.close()
                session = runtime.resume(stored[0])
            outcome = session.run(item or "go on", timeout=600)
            seconds = time.perf_counter() - started
            peak = status("VmHWM")
            top = watcher.stop() if watcher is not None else []
            assert outcome.ok, outcome
            session.close()
    finally:
        server.stdin.close()
        server.wait()
    return {"baseline": baseline, "peak": peak, "seconds": seconds, "top": top}


def measure(case: str, size: int, db: str, trace: bool, wire: str = "chat") -> dict[str, Any]:
    """Run ``case`` in a fresh process; return its figures."""
    command = [sys.executable, __file__, "--case", case, "--size", str(size), "--db", db]
    command += ["--wire", wire]
    if trace:
        command.append("--trace")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"case {case} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="items / 10")
    parser.add_argument("--trace", action="store_true", help="tracemalloc's top lines at the peak")
    parser.add_argument("--wire", choices=["chat", "responses"], default="chat", help="the API")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.case:
        print(json.dumps(run_case(args.case, args.size, args.db, args.trace, args.wire)))
        return
    scale = 10 if args.quick else 1
    sizes = {"prompt": 50 * MB // scale, "tool": 20 * MB // scale, "resume": 50 * MB // scale}
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for case, size in sizes.items():
            db = str(Path(tmp) / ("tool.db" if case == "tool" else "prompt.db"))
            results[case] = measure(case, size, db, args.trace, args.wire)
    lines: list[Line] = []
    for case, size in sizes.items():
        r = results[case]
        ratio = (r["peak"] - r["baseline"]) / size
        label = f"{case}: {size / MB:.0f} MB item, {r['seconds']:.2f} s"
        peak, base = f"{r['peak'] / MB:.0f} MB", f"{r['baseline'] / MB:.0f} MB"
        lines.append((label, peak, base, f"{ratio:.2f}x item", "<= 3.00x item"))
    table(
        f"peak resident memory for one large item (SQLite store, {args.wire} wire)",
        lines,
        "ours: peak RSS; raw: the baseline before the item; ratio: (peak - baseline) / item",
    )
    for case in sizes:
        for line in results[case]["top"]:
            print(f"  {case}: {line}")


if __name__ == "__main__":
    main()
