"""Bytes on disk per turn: plait's SQLite log beside openai-agents' ``SQLiteSession``.

Run from the repository root: ``python bench/storage.py [--quick]`` (see bench/README.md).

The same turns, scripted by ``ScriptedModelServer`` (a fresh one per session), are recorded by
plait (``Runtime`` on a SQLite file) and by openai-agents (``Agent`` + ``Runner.run`` with a
``SQLiteSession`` file, in a process of its own: ``agents_session.py``, run by the Python of
a virtualenv made for it on first use under ~/.cache/plait-bench/agents). Each prompt and
reply carries the turn's number, so no two turns' text is the same (as in a real session).

1. 200 plain turns in one session: a short prompt, a ~20-token reply.
2. 200 turns in one session, each a call of the function tool ``lookup``, then the reply.
3. 1,000 turns in 10 sessions of 100, each a call of ``read_log``, which returns the same
   20,000-byte text every time.

``--quick`` runs 20, 20 and 2 x 50 turns. ``--postgres URL`` (default: ``PLAIT_TEST_POSTGRES``,
if set) records each case again in a schema of its own on that server and prints the bytes of
its relations (tables, indexes, TOAST) as left and after ``VACUUM FULL``, beside the SQLite
file.
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
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import psycopg

from plait.actors import ModelSettings
from plait.events._packing import decompressed
from plait.events.stores import PostgresStore
from plait.runtime import Runtime, RuntimeSettings
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


def run_plait(
    db: Path | str, kind: str, sessions: list[range], workdir: Path | None = None
) -> None:
    """Record ``sessions`` (each a range of turn numbers) with plait, a runtime per session,
    in the SQLite file ``db`` or the store at URL ``db``."""
    workdir = workdir or Path(db).parent
    for turns in sessions:
        with ScriptedModelServer(steps(kind, turns), model=MODEL) as server:
            settings = ModelSettings(base_url=server.base_url, api_key="x", model=MODEL)
            tools: list[Callable[..., object]] = [lookup, read_log]
            with Runtime(
                db, RuntimeSettings(model=settings, workdir=workdir, tools=tools)
            ) as runtime:
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
SELECT (SELECT sum(count) FROM appends),
       (SELECT sum(length(data) + coalesce(length(prev_hash), 0) + length(hash)) FROM appends),
       (SELECT count(*) FROM blobs) + (SELECT count(*) FROM contents),
       (SELECT coalesce(sum(length(data)), 0) FROM blobs)
           + (SELECT coalesce(sum(length(content)), 0) FROM appends),
       (SELECT count(*) FROM blobs WHERE size >= :large)"""
AGENTS_ROWS = """
SELECT count(*), sum(length(CAST(message_data AS BLOB))), 0, 0,
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
    """Bytes of plait's content: its rows' ``content`` and ``blobs.data``."""
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


def measure_postgres(url: str, kind: str, sessions: list[range], workdir: Path) -> tuple[int, int]:
    """Record ``sessions`` in a schema of their own at ``url``; return the bytes of its
    relations as left, and after ``VACUUM FULL`` (the schema is dropped after)."""
    schema = f"plait_bench_storage_{uuid.uuid4().hex[:8]}"
    tables = ", ".join(f'"{schema}".{t}' for t in ("appends", "streams", "blobs", "leases"))
    with psycopg.connect(url, autocommit=True) as admin:
        try:
            run_plait(f"{url}{'&' if '?' in url else '?'}schema={schema}", kind, sessions, workdir)
            with PostgresStore(url, schema=schema) as store:
                left = store.space().total or 0
                admin.execute(f"VACUUM FULL {tables}")
                return left, store.space().total or 0
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


Entry = tuple[str, bytes]
"""An event as its row holds it: its type, and its entry (encoding 3) before compression."""

_RAWS = msgspec.msgpack.Decoder(list[msgspec.Raw])


def _appends(db: Path) -> list[tuple[str, int, int, int, list[Entry]]]:
    """Every row of ``appends`` (an append each) in position order: its stream, seq, stored
    ``data`` bytes, ``content`` bytes, and its events' entries."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT n.name, a.seq, a.count, a.data, coalesce(length(a.content), 0) "
            "FROM appends AS a JOIN names AS n ON n.key = a.stream ORDER BY a.position"
        ).fetchall()
    found = []
    for stream, seq, count, data, content in rows:
        plain = decompressed(data)
        raws = _RAWS.decode(b"\xdd" + count.to_bytes(4, "big") + plain)
        entries = [(msgspec.msgpack.decode(raw)[3]["type"], bytes(raw)) for raw in raws]
        found.append((stream, seq, len(data), content, entries))
    return found


def event_types(db: Path) -> list[tuple[str, int, int]]:
    """Each event type: how many, and their entries' bytes, before compression."""
    totals: dict[str, list[int]] = {}
    for *_, entries in _appends(db):
        for kind, entry in entries:
            totals.setdefault(kind, [0, 0])
            totals[kind][0] += 1
            totals[kind][1] += len(entry)
    return sorted(((k, n, b) for k, (n, b) in totals.items()), key=lambda t: -t[2])


def one_turn(db: Path) -> list[list[str]]:
    """The rows of the middle turn of section 1, each an append: its events, their bytes
    before and after compression, and the content kept beside them."""
    appends = _appends(db)
    starts = [i for i, a in enumerate(appends) if any(e[0] == "TaskEnqueued" for e in a[4])]
    middle = starts[len(starts) // 2]
    rows = [["row (an append)", "events", "entries B", "stored B", "hash B", "content B"]]
    for _, _, data, content, entries in appends[middle : middle + 2]:
        kinds = ", ".join(kind for kind, _ in entries)
        packed = sum(len(entry) for _, entry in entries)
        rows.append([kinds, str(len(entries)), f"{packed:,}", f"{data:,}", "32", f"{content:,}"])
    return rows


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
        ("row data (events and hashes / message_data)", ours.data, base and base.data),
        ("row data + plait's content", ours.data + ours.blobs, base and base.data),
    ]:
        if theirs:
            baseline = [f"{theirs:,}", f"{mine / theirs:.2f}x", f"{theirs / turns:,.0f}"]
        else:
            baseline = ["-", "-", "-"]
        rows.append([label, f"{mine:,}", *baseline[:2], f"{mine / turns:,.0f}", baseline[2]])
    show(rows)
    agents_rows = f"{base.rows:,} message rows" if base else "openai-agents not run"
    print(f"  rows: plait {ours.rows:,} events, {ours.blob_rows:,} blobs; {agents_rows}")


def breakdown(db: Path, ours: Size, turns: int) -> None:
    print(f"\n   plait's events by type ({turns} turns), packed, before compression")
    rows = [["type", "events", "packed B", "B/turn", "share"]]
    types = event_types(db)
    packed = sum(data for _, _, data in types)
    for kind, count, data in types:
        rows.append(
            [kind, f"{count:,}", f"{data:,}", f"{data / turns:,.0f}", f"{data / packed:.0%}"]
        )
    show(rows)
    print(f"  {packed:,} B packed; stored compressed, with their hashes: {ours.data:,} B")
    print("\n   plait's file after VACUUM by table and index (dbstat pages)")
    pages = sorted(ours.pages.items(), key=lambda kv: -kv[1])
    show(
        [
            ["table or index", "B", "B/turn"],
            *([name, f"{size:,}", f"{size / turns:,.0f}"] for name, size in pages),
        ]
    )
    print("\n   one turn (the middle one), its two rows (docs/storage.md#the-bytes-of-one-turn)")
    show(one_turn(db))
    print(f"  the file holds {ours.left / turns:,.0f} B a turn in all (rows, indexes, pages)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20, 20 and 2 x 50 turns")
    parser.add_argument("--agents-venv", type=Path, default=VENV, help="openai-agents' venv")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("PLAIT_TEST_POSTGRES"),
        help="also record each case on this PostgreSQL server (default: $PLAIT_TEST_POSTGRES)",
    )
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
            if args.postgres:
                left, packed = measure_postgres(args.postgres, kind, sessions, Path(tmp))
                print(
                    f"  PostgreSQL relations: {left:,} B as left ({left / turns:,.0f} B/turn, "
                    f"{left / ours.left:.2f}x the SQLite file), {packed:,} B after VACUUM FULL "
                    f"({packed / ours.vacuumed:.2f}x the SQLite file after VACUUM)"
                )
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
