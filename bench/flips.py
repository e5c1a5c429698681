"""Flip single bytes across a whole SQLite log and classify what every reader then does.

A small session is recorded in a SQLite file against ``ScriptedModelServer`` (three tasks: a
helper conversation, ``conv_list`` and ``conv_history`` calls; tool outputs over 64 bytes are
stored as blob rows). Candidate offsets are drawn from every page of the file; each is
sorted into the region it changes by reading the flipped file's rows with ``sqlite3`` beside
the original's (``event data``, ``event hash``, ``event envelope`` for the other columns of an
event's row (an append's), ``blob rows`` (a row of ``blobs``, or the small content an append's
row keeps), ``streams table``, ``names table`` (the store's stream ids), ``other rows``) or, when no
row reads differently, by where it lies (``file header``, ``schema page``, ``index pages``, ``table
interior pages``, ``table leaf, no row changed``, ``other pages``; ``unreadable`` when
``sqlite3`` cannot read the tables at all). The flips are then chosen a page at a time and
a region at a time, and each flipped file goes through every reader of the command line:
``plait log``, ``history``, ``audit``, ``replay``, ``verify``, ``show`` and ``exec --session``
(a resumed task). Each outcome is one of:

- **detected**: exit 1, one line naming the damage (tampered, corrupt, edited, missing...);
- **clean error**: exit 1, one line, another cause;
- **noisy error**: exit non-zero with more lines on stderr than the reader prints unflipped
  plus one;
- **silent**: exit 0 though a row changed (``replay``'s "no difference" included), or exit 0
  with output that differs from the unflipped file's;
- **unaffected**: exit 0, the same output, and no row changed;
- **traceback**: ``Traceback`` on stderr;
- **hang**: no exit within ``--timeout`` seconds.

Printed: a table of region x reader, and every silent, traceback and hang case (offset, xor
mask, reader, its last line), each reproducible with ``--only OFFSET:MASK``.

    python bench/flips.py                   # 120 flips x 7 readers, a few minutes on 2 cores
    python bench/flips.py --flips 40 --jobs 2
    python bench/flips.py --only 20517:0x5a
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from plait.actors import ModelSettings
from plait.events import SqliteStore
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

READERS: dict[str, list[str]] = {
    "log": ["log", "{sid}"],
    "history": ["history", "{sid}"],
    "audit": ["audit", "{sid}"],
    "replay": ["replay", "{sid}"],
    "verify": ["verify", "{sid}"],
    "show": ["show", "{sid}"],
    "exec": ["exec", "--session", "{sid}", "Go on."],
}
"""Every reader of a session's log, as the command line runs it."""

OUTCOMES = ["detected", "clean error", "noisy error", "silent", "unaffected", "traceback", "hang"]
BAD = ("silent", "traceback", "hang")
NAMES_DAMAGE = re.compile(
    r"tamper|corrupt|hash|chain|integrity|malformed|damaged|not a database|edited|missing"
)
"""Words of a line that names the damage rather than some other cause."""

CREATE = ScriptedToolCall("conv_create", '{"user_instruction": "Count the changes."}')
SCRIPT = [
    Step(text="Asking a helper.", tool_calls=[CREATE]),
    Step(text="There are two changes, both small. " * 4),
    Step(text="The helper says two."),
    Step(text="Listing.", tool_calls=[ScriptedToolCall("conv_list")]),
    Step(text="Two conversations."),
    Step(text="Reading.", tool_calls=[ScriptedToolCall("conv_history", '{"id": "flip-3"}')]),
    Step(text="The helper counted two."),
]
PROMPTS = ["How many changes?", "Which conversations?", "What did the helper say?"]


def record(path: Path) -> str:
    """Record the session in a fresh SQLite file at ``path``; return its id."""
    ids = iter(f"flip-{n}" for n in range(1, 10_000))
    with ScriptedModelServer(SCRIPT) as server, SqliteStore(path, blob_threshold=64) as store:
        model = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
        with Runtime(
            store, RuntimeSettings(model=model, new_id=lambda: next(ids), workdir=path.parent)
        ) as rt:
            session = rt.start_session()
            for prompt in PROMPTS:
                session.run(prompt, timeout=60)
            sid = session.session_id
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sid


def rows(
    path: Path, tables: list[str]
) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]] | None:
    """Every table's columns and rows (rowid first), read as ``sqlite3`` reads them; ``None``
    if it cannot."""
    try:
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        conn.text_factory = bytes  # a flipped text may not be UTF-8: compare its bytes
        try:
            out = {}
            for table in tables:
                try:
                    cursor = conn.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid")
                except sqlite3.OperationalError:  # WITHOUT ROWID: its key is its first column
                    cursor = conn.execute(f"SELECT * FROM {table}")
                out[table] = ([d[0] for d in cursor.description], cursor.fetchall())
            return out
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError):  # a name in the schema may be bytes
        return None


class File:
    """The recorded file: its bytes, its pages' kinds, its rows."""

    def __init__(self, path: Path, scratch: Path) -> None:
        self.data = path.read_bytes()
        self.scratch = scratch
        size = int.from_bytes(self.data[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        conn = sqlite3.connect(path)
        self.tables = [
            n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        conn.close()
        original = rows(path, self.tables)
        assert original is not None
        self.rows = original

    @property
    def pages(self) -> int:
        return len(self.data) // self.page_size

    def flipped(self, offset: int, mask: int) -> bytes:
        return self.data[:offset] + bytes([self.data[offset] ^ mask]) + self.data[offset + 1 :]

    def region(self, offset: int, mask: int) -> str:
        """Which region the flip of the byte at ``offset`` changes (see the module's doc)."""
        if offset < 100:
            return "file header"
        probe = self.scratch / "probe.db"
        probe.write_bytes(self.flipped(offset, mask))
        after = rows(probe, self.tables)
        if after is None:
            return "unreadable"
        changed = set()
        for table, (columns, before) in self.rows.items():
            now = after[table][1]
            if len(now) != len(before) or any(
                a[0] != b[0] for a, b in zip(before, now, strict=True)
            ):
                changed.add((table, "rowid"))
                continue
            for a, b in zip(before, now, strict=True):
                changed |= {(table, c) for c, x, y in zip(columns, a, b, strict=True) if x != y}
        if changed:
            tables = {t for t, _ in changed}
            if "appends" in tables:
                columns = {c for t, c in changed if t == "appends"}
                if columns == {"content"}:  # its small blobs
                    return "blob rows"
                if columns == {"data"}:
                    return "event data"
                return "event hash" if columns == {"hash"} else "event envelope"
            if "names" in tables:  # a stream's id, for all its rows
                return "names table"
            if "blobs" in tables:
                return "blob rows"
            return "streams table" if "streams" in tables else "other rows"
        page = offset // self.page_size
        if page == 0:
            return "schema page"
        kind = self.data[page * self.page_size]
        return {2: "index pages", 10: "index pages", 5: "table interior pages"}.get(
            kind, "table leaf, no row changed" if kind == 13 else "other pages"
        )


def choose(file: File, count: int, rng: random.Random) -> list[tuple[int, int, str]]:
    """``count`` flips (offset, mask, region): one on every page first, then a region at a
    time, from candidates drawn evenly over the pages."""
    per_page = max(4, 12 * count // file.pages)
    by_region: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
    first: list[tuple[int, int, str]] = []
    for page in range(file.pages):
        offsets = rng.sample(range(page * file.page_size, (page + 1) * file.page_size), per_page)
        for i, offset in enumerate(offsets):
            mask = rng.randrange(1, 256)
            flip = (offset, mask, file.region(offset, mask))
            (first if i == 0 else by_region[flip[2]]).append(flip)
    chosen = first[:count]
    queues = list(by_region.values())
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop())
    return chosen


class Bench:
    """Runs the readers on flipped copies in a directory with a ``plait.toml``."""

    def __init__(self, work: Path, sid: str, base_url: str, timeout: float) -> None:
        self.work, self.sid, self.timeout = work, sid, timeout
        (work / "plait.toml").write_text(
            f'[model]\nbase_url = "{base_url}"\nmodel = "scripted-model"\nmax_attempts = 1\n'
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAIT_", "OPENAI_"))}
        self.env["NO_COLOR"] = "1"
        self.baseline: dict[str, tuple[int, str, int]] = {}

    def run(self, reader: str, data: bytes, name: str) -> tuple[int | None, str, str]:
        """Run ``reader`` on a copy holding ``data``: exit code (``None``: hung), out, err."""
        folder = self.work / name
        folder.mkdir()
        store = folder / "plait.db"
        store.write_bytes(data)
        args = [a.format(sid=self.sid) for a in READERS[reader]]
        command = [sys.executable, "-m", "plait", *args, "--store", str(store)]
        try:
            done = subprocess.run(command, cwd=self.work, env=self.env, capture_output=True,
                                  text=True, errors="replace", timeout=self.timeout)  # fmt: skip
            return done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            return None, "", ""
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def classify(self, reader: str, region: str, code: int | None, out: str, err: str) -> str:
        if code is None:
            return "hang"
        if "Traceback" in err:
            return "traceback"
        _, base_out, base_lines = self.baseline[reader]
        changed_rows = region.startswith(("event", "blob", "streams", "names", "other rows"))
        if code == 0:
            return "silent" if changed_rows or out != base_out else "unaffected"
        if len(err.strip().splitlines()) > base_lines + 1:
            return "noisy error"
        return "detected" if NAMES_DAMAGE.search(last_line(out, err).lower()) else "clean error"


def last_line(out: str, err: str) -> str:
    lines = err.strip().splitlines() or out.strip().splitlines() or [""]
    return lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flips", type=int, default=120, help="flips (default 120)")
    parser.add_argument("--jobs", type=int, default=2, help="readers run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per reader (30)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--only", help="one flip, OFFSET:MASK (as the report prints them)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "record").mkdir()
        sid = record(work / "record" / "plait.db")
        file = File(work / "record" / "plait.db", work)
        if args.only:
            offset, mask = (int(x, 0) for x in args.only.split(":"))
            flips = [(offset, mask, file.region(offset, mask))]
        else:
            flips = choose(file, args.flips, rng)
        print(f"{len(file.data)} bytes, {file.pages} pages of {file.page_size}; "
              f"{len(flips)} flips x {len(READERS)} readers", file=sys.stderr)  # fmt: skip
        steps = [Step(text="Fine.")] * (len(flips) * 2 + 20)
        with ScriptedModelServer(steps) as server:
            bench = Bench(work, sid, server.base_url, args.timeout)
            for reader in READERS:
                code, out, err = bench.run(reader, file.data, f"base-{reader}")
                if code != 0:
                    raise SystemExit(f"{reader} fails on the unflipped file:\n{out}{err}")
                bench.baseline[reader] = (code, out, len(err.strip().splitlines()))
            results = run_all(bench, file, flips, args.jobs)
    report(flips, results)


def run_all(
    bench: Bench, file: File, flips: list[tuple[int, int, str]], jobs: int
) -> dict[tuple[int, str], tuple[str, str]]:
    """Every reader on every flip: (flip index, reader) -> (outcome, last line)."""

    def one(task: tuple[int, str]) -> tuple[tuple[int, str], tuple[str, str]]:
        i, reader = task
        offset, mask, region = flips[i]
        code, out, err = bench.run(reader, file.flipped(offset, mask), f"f{i}-{reader}")
        outcome = bench.classify(reader, region, code, out, err)
        tb = (
            [line for line in err.splitlines() if line.strip()][-1:]
            if outcome == "traceback"
            else []
        )
        return task, (outcome, (tb or [last_line(out, err)])[0][:160])

    tasks = [(i, reader) for i in range(len(flips)) for reader in READERS]
    results = {}
    with ThreadPoolExecutor(jobs) as pool:
        for n, (task, result) in enumerate(pool.map(one, tasks), 1):
            results[task] = result
            print(f"\r{n}/{len(tasks)} runs", end="", file=sys.stderr)
    print(file=sys.stderr)
    return results


def report(
    flips: list[tuple[int, int, str]], results: dict[tuple[int, str], tuple[str, str]]
) -> None:
    """Print region x reader (outcomes counted), the totals, then every bad case."""
    short = {"detected": "det", "clean error": "err", "noisy error": "noisy", "silent": "SILENT",
             "unaffected": "same", "traceback": "TRACEBACK", "hang": "HANG"}  # fmt: skip
    regions = sorted({r for _, _, r in flips})
    cells: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(
        collections.Counter
    )
    totals: collections.Counter[str] = collections.Counter()
    for (i, reader), (outcome, _) in results.items():
        cells[flips[i][2], reader][outcome] += 1
        totals[outcome] += 1

    def cell(c: collections.Counter[str]) -> str:
        return " ".join(f"{c[o]}{short[o]}" for o in OUTCOMES if c[o]) or "-"

    count = collections.Counter(r for _, _, r in flips)
    table = [["region (flips)", *READERS]]
    table += [
        [f"{r} ({count[r]})", *(cell(cells[r, reader]) for reader in READERS)] for r in regions
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print("\ntotal:", ", ".join(f"{o} {totals[o]}" for o in OUTCOMES))
    bad = sorted((i, reader) for (i, reader), (o, _) in results.items() if o in BAD)
    for i, reader in bad:
        offset, mask, region = flips[i]
        outcome, line = results[i, reader]
        print(f"{outcome}: --only {offset}:{mask:#04x} ({region}) plait {reader}: {line}")


if __name__ == "__main__":
    main()
