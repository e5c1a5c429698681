"""Bytes on disk per turn: plait's SQLite log beside openai-agents' ``SQLiteSession``.

Run from the repository root: ``python bench/storage.py [--quick]`` (see README.md).

The same turns, scripted by ``ScriptedModelServer`` (a fresh one per session), are recorded by
plait (``Runtime`` on a SQLite file) and by openai-agents (``Agent`` + ``Runner.run`` with a
``SQLiteSession`` file, in a process of its own: ``agents_session.py``, run by the Python of
a virtualenv made for it on first use under ~/.cache/plait-bench/agents). Each prompt and
reply carries the turn's number, so no two turns' text is the same (as in a real session).

1. 200 plain turns in one session: a short prompt, a ~20-token reply.
2. 200 turns in one session, each a call of the function tool ``lookup``, then the reply.
3. 1,000 turns in 10 sessions of 100, each a call of ``read_log``, which returns the same
   20,000-byte text every time.

``--quick`` runs 20, 20 and 2 x 50 turns.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from plait.actors.model import ModelSettings
from plait.events.types import Event
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

AGENTS = "openai-agents>=0.24,<0.25"
VENV = Path(os.environ.get("PLAIT_BENCH_AGENTS", "~/.cache/plait-bench/agents")).expanduser()
"""Where openai-agents is installed, apart from the project's virtualenv."""
CHILD = Path(__file__).with_name("agents_session.py")
MODEL = "scripted-model"
CITIES = ["Paris", "Lisbon", "Oslo", "Kyoto", "Lima", "Accra", "Perth"]
LOG = "".join(
    f"[{n:05d}] compiled src/module_{n % 37:02d}.py in {n % 9}.{n % 7} ms: ok\n"
    for n in range(1000)
)[:20_000]
"""The large tool output of section 3: the same 20,000 bytes every call."""


def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"Sunny in {city}, 21 degrees."


def read_log() -> str:
    """Read the build log."""
    return LOG


def prompt(i: int) -> str:
    return f"Say hello to guest {i}."


def reply(i: int) -> str:
    return f"Hello, guest {i}! Good to meet you. What shall we work on together today?"


def steps(kind: str, turns: range) -> list[Step]:
    """The model's side of ``turns``: a tool call first (but for ``plain``), then the reply."""
    script: list[Step] = []
    for i in turns:
        if kind == "tool":
            args = json.dumps({"city": CITIES[i % len(CITIES)]})
            script.append(Step(tool_calls=[ScriptedToolCall("lookup", args)]))
        elif kind == "large":
            script.append(Step(tool_calls=[ScriptedToolCall("read_log")]))
        script.append(Step(text=reply(i)))
    return script


# --- the two recorders --------------------------------------------------------------------------


def run_plait(db: Path, kind: str, sessions: list[range]) -> None:
    """Record ``sessions`` (each a range of turn numbers) with plait, a runtime per session."""
    for turns in sessions:
        with ScriptedModelServer(steps(kind, turns), model=MODEL) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
            tools: list[Callable[..., object]] = [lookup, read_log]
            with Runtime(db, model=settings, workdir=db.parent, tools=tools) as runtime:
                session = runtime.start_session()
                for i in turns:
                    outcome = session.run(prompt(i), timeout=120)
                    assert outcome.ok, outcome


def run_agents(python: Path, db: Path, kind: str, sessions: list[range]) -> None:
    """Record ``sessions`` with openai-agents, in a child process on its own virtualenv."""
    # -I: neither PYTHONPATH nor the bench's directory (its mcp.py would hide the mcp package).
    with subprocess.Popen(
        [str(python), "-I", str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        for n, turns in enumerate(sessions):
            with ScriptedModelServer(steps(kind, turns), model=MODEL) as server:
                spec = {
                    "db": str(db),
                    "session_id": f"session-{n}",
                    "base_url": server.base_url,
                    "prompts": [prompt(i) for i in turns],
                    "output": LOG,
                }
                child.stdin.write(json.dumps(spec) + "\n")
                child.stdin.flush()
                line = child.stdout.readline()
                if not line:
                    raise RuntimeError(f"the openai-agents process exited ({child.wait()})")
                items = json.loads(line)["items"]
                assert items == len(turns) * (2 if kind == "plain" else 4), items
        child.stdin.close()


def install(venv: Path) -> Path | None:
    """Return ``venv``'s Python with openai-agents, installing it first; None if that fails."""
    marker, python = venv / ".plait-bench", venv / "bin" / "python"
    if python.exists() and marker.exists() and marker.read_text() == AGENTS:
        return python
    print(f"installing {AGENTS} into {venv} (a minute, once) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, AGENTS], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"openai-agents not installed ({exc}): pip install openai-agents", flush=True)
        return None
    marker.write_text(AGENTS)  # only once venv and pip have both finished
    return python


# --- what the files hold -----------------------------------------------------------------------

PLAIT_ROWS = """
SELECT (SELECT count(*) FROM events), (SELECT sum(length(data)) FROM events),
       count(*), coalesce(sum(length(data)), 0),
       -- a session's blob starts with its scope: the stream, a newline, a 16-byte salt
       coalesce(sum(instr(data, X'0A') + 16) FILTER (WHERE CAST(substr(data, 1,
           instr(data, X'0A') - 1) AS TEXT) IN (SELECT stream FROM streams)), 0),
       count(*) FILTER (WHERE size >= :large)
FROM blobs"""
AGENTS_ROWS = """
SELECT count(*), sum(length(CAST(message_data AS BLOB))), 0, 0, 0,
       count(*) FILTER (WHERE length(message_data) >= :large)
FROM agent_messages"""


@dataclass
class Size:
    """A store's file, measured after a run."""

    left: int
    """Bytes of the database and its WAL after ``PRAGMA wal_checkpoint(TRUNCATE)``."""
    rows: int
    """Events (plait) or message rows (openai-agents)."""
    data: int
    """Bytes of the rows' encoded content: ``events.data``, ``agent_messages.message_data``."""
    blob_rows: int
    blobs: int
    """Bytes of ``blobs.data`` (plait): each blob's scope prefix, then its content."""
    prefixes: int
    """Bytes of the blobs' scope prefixes."""
    large: int
    """Rows that hold the large output of section 3 (whole)."""
    vacuumed: int = 0
    """Bytes of the database after ``VACUUM``."""
    pages: dict[str, int] = field(default_factory=dict)
    """Bytes of pages by table or index after ``VACUUM`` (``dbstat``)."""


def measure(db: Path, plait: bool) -> Size:
    """Checkpoint ``db`` and measure it, then ``VACUUM`` it and measure it again."""
    wal = db.with_name(db.name + "-wal")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        left = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        counts = conn.execute(PLAIT_ROWS if plait else AGENTS_ROWS, {"large": len(LOG)})
        size = Size(left, *counts.fetchone())
        conn.execute("VACUUM")
        size.pages = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
    size.vacuumed = db.stat().st_size
    return size


def event_types(db: Path) -> list[tuple[str, int, int]]:
    with closing(sqlite3.connect(db)) as conn:
        query = "SELECT type, count(*), sum(length(data)) AS b FROM events GROUP BY type"
        return conn.execute(query + " ORDER BY b DESC").fetchall()


def one_turn(db: Path) -> list[tuple[str, str, int]]:
    """Where the bytes of one turn of section 1 go, field by field: each event of the
    session's middle task, its stored bytes taken apart (each field's name and value as
    msgpack holds them; the rest is msgpack's own headers), then what its row adds beside
    ``data`` and the blobs it brings. ``(event type, part, bytes)``, in the order written."""
    with closing(sqlite3.connect(db)) as conn:
        keyed = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'log'").fetchall())
        # What the row holds beside its data: the stream's id and the type's name as text
        # (layouts 1 and 2), or their keys (layout 3), and the hash.
        columns = "l.stream, l.type" if keyed else "length(e.stream), length(e.type)"
        rows = conn.execute(
            f"SELECT e.type, e.data, {columns}, length(e.hash) FROM events AS e "
            + ("JOIN log AS l USING (position) " if keyed else "")
            + "ORDER BY e.position"
        ).fetchall()
        blobs = dict(conn.execute("SELECT sha256, length(data) FROM blobs").fetchall())
    enqueued = [i for i, row in enumerate(rows) if row[0] == "TaskEnqueued"]
    middle = enqueued[len(enqueued) // 2]
    end = next(i for i in range(middle, len(rows)) if rows[i][0] == "TaskCompleted")
    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for kind, data, stream, type_, digest in rows[middle : end + 1]:
        raw = msgspec.msgpack.decode(data)
        if isinstance(raw, dict):  # encoding 1: each field's name, then its value
            parts = [(name, _packed(name) + _packed(value)) for name, value in raw.items()]
        else:  # encoding 2: the values, in the order of Event's fields
            raw = dict(zip(Event.__struct_fields__, raw, strict=True))
            parts = [(name, _packed(value)) for name, value in raw.items()]
        fields = [(f"body.{k}", _packed(k) + _packed(v)) for k, v in raw["body"].items()]
        parts = [part for part in parts if part[0] != "body"] + fields
        parts.append(("msgpack headers", len(data) - sum(b for _, b in parts)))
        if keyed:
            row = _int_bytes(stream) + _int_bytes(type_) + digest
            parts.append(("row: stream and type keys, hash", row))
        else:
            parts.append(("row: stream, type, hash", stream + type_ + digest))
        for ref in _refs(raw):
            if ref not in seen:
                seen.add(ref)
                parts.append(("blob: scope + content", blobs.get(ref, 0)))
                parts.append(("blob: hex key, table + index", 2 * len(ref)))
        out.extend((kind, name, size) for name, size in parts)
    return out


def _int_bytes(value: int) -> int:
    """The bytes of an integer in a SQLite record (0 and 1 take none: its type says them)."""
    if value in (0, 1):
        return 0
    return next(n for n in (1, 2, 3, 4, 6, 8) if -(1 << (8 * n - 1)) <= value < 1 << (8 * n - 1))


def _packed(value: object) -> int:
    return len(msgspec.msgpack.encode(value))


def _refs(value: object) -> list[str]:
    if isinstance(value, dict):
        if value.get("kind") == "blob":
            return [str(value["sha256"])]
        return [ref for item in value.values() for ref in _refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in _refs(item)]
    return []


# --- output ------------------------------------------------------------------------------------


def show(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  " + " | ".join(cells).rstrip())


def section(title: str, ours: Size, base: Size | None, turns: int) -> None:
    print(f"\n== {title}")
    rows = [["", "plait B", "openai-agents B", "plait/agents", "plait B/turn", "agents B/turn"]]
    for label, mine, theirs in [
        ("file as left (db+wal after checkpoint)", ours.left, base and base.left),
        ("file after VACUUM", ours.vacuumed, base and base.vacuumed),
        ("row data (events.data / message_data)", ours.data, base and base.data),
        ("row data + plait's blobs.data", ours.data + ours.blobs, base and base.data),
    ]:
        if theirs:
            baseline = [f"{theirs:,}", f"{mine / theirs:.2f}x", f"{theirs / turns:,.0f}"]
        else:
            baseline = ["-", "-", "-"]
        rows.append([label, f"{mine:,}", *baseline[:2], f"{mine / turns:,.0f}", baseline[2]])
    show(rows)
    agents_rows = f"{base.rows:,} message rows" if base else "openai-agents not run"
    print(
        f"  rows: plait {ours.rows:,} events, {ours.blob_rows:,} blobs ({ours.prefixes:,} B "
        f"of them scope prefixes); {agents_rows}"
    )


def breakdown(db: Path, ours: Size, turns: int) -> None:
    print(f"\n   plait's event data by type ({turns} turns; blobs hold the content apart)")
    rows = [["type", "events", "data B", "B/turn", "share"]]
    for kind, count, data in event_types(db):
        rows.append(
            [kind, f"{count:,}", f"{data:,}", f"{data / turns:,.0f}", f"{data / ours.data:.0%}"]
        )
    show(rows)
    print("\n   plait's file after VACUUM by table and index (dbstat pages)")
    pages = sorted(ours.pages.items(), key=lambda kv: -kv[1])
    show(
        [
            ["table or index", "B", "B/turn"],
            *([name, f"{size:,}", f"{size / turns:,.0f}"] for name, size in pages),
        ]
    )
    parts = one_turn(db)
    print("\n   one turn (the middle one), part by part: its events' stored bytes, rows, blobs")
    totals: dict[str, list[int]] = {}
    for kind, name, size in parts:
        key = f"{kind}.{name[5:]}" if name.startswith("body.") else name
        totals.setdefault(key, []).append(size)
    rows = [["part", "B", "share", "how"]]
    total = sum(size for _, _, size in parts)
    for key, sizes in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        how = f"{len(sizes)} x {sizes[0]}" if len(set(sizes)) == 1 else " + ".join(map(str, sizes))
        rows.append([key, f"{sum(sizes):,}", f"{sum(sizes) / total:.0%}", how])
    show(rows)
    index = max(ours.pages.get(f"sqlite_autoindex_{t}_1", 0) for t in ("events", "log"))
    print(
        f"  {total:,} B; besides, SQLite's (stream, seq) index ~{index / ours.rows:.0f} B an "
        "event and "
        f"row and page headers: the file holds {ours.vacuumed / turns:,.0f} B a turn in all"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20, 20 and 2 x 50 turns")
    parser.add_argument("--agents-venv", type=Path, default=VENV, help="openai-agents' venv")
    args = parser.parse_args()
    n, per, count = (20, 50, 2) if args.quick else (200, 100, 10)
    large = [range(k * per, (k + 1) * per) for k in range(count)]
    python = install(args.agents_venv)
    cases = [
        ("plain", [range(n)], f"1. {n} plain turns, one session (prompt, ~20-token reply)"),
        ("tool", [range(n)], f"2. {n} turns, one session, one `lookup` tool call each"),
        (
            "large",
            large,
            f"3. {len(large) * len(large[0]):,} turns in {len(large)} sessions, "
            f"each a `read_log` call returning the same {len(LOG):,} B",
        ),
    ]
    verdict = ""
    with tempfile.TemporaryDirectory(prefix="plait-storage-") as tmp:
        for kind, sessions, title in cases:
            turns = sum(len(s) for s in sessions)
            ours_db, base_db = Path(tmp, f"{kind}.plait.db"), Path(tmp, f"{kind}.agents.db")
            started = time.perf_counter()
            run_plait(ours_db, kind, sessions)
            took = f"recorded: plait {time.perf_counter() - started:.0f} s"
            ours, base = measure(ours_db, plait=True), None
            if python is not None:
                started = time.perf_counter()
                run_agents(python, base_db, kind, sessions)
                took += f", openai-agents {time.perf_counter() - started:.0f} s"
                base = measure(base_db, plait=False)
            section(title, ours, base, turns)
            print(f"  {took}")
            if kind == "plain":
                breakdown(ours_db, ours, turns)
                if base is not None:
                    ratio = ours.left / base.left
                    verdict = (
                        f"verdict (section 1): plait {ours.left:,} B / openai-agents "
                        f"{base.left:,} B = {ratio:.2f}x (goal <= 1.3x: "
                        f"{'met' if ratio <= 1.3 else 'not met'})"
                    )
            if kind == "large":
                agents = f"; openai-agents {base.large:,} (no dedup)" if base else ""
                print(
                    f"  copies of the {len(LOG):,} B output: plait {ours.large:,} (a blob per "
                    f"session: blobs are scoped to theirs){agents}"
                )
    print("\n" + (verdict or "verdict (section 1): no baseline (openai-agents not installed)"))


if __name__ == "__main__":
    main()
