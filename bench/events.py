"""Event-store benchmarks, each printed beside a raw SQLite / msgspec baseline.

Run from the repository root: ``python bench/events.py [--quick] [--profile]``
(see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import pstats
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
from report import Line, table

from plait import events as ev
from plait.events import _packing as packing
from plait.events.projections import HistoryProjection
from plait.events.stores._sqlite_schema import SCHEMA


def _ddl(name: str) -> str:
    """SqliteStore's own ``CREATE TABLE`` of ``name``, so the raw baseline's tables are the
    store's, whatever its layout becomes."""
    (ddl,) = (s.strip() for s in SCHEMA.split(";") if f"EXISTS {name} (" in s)
    return ddl


# The raw baseline writes what SqliteStore writes for an append: its row of ``appends`` (one
# per append, its events one zstd frame, layout 5) and its stream's head in ``streams``.
APPENDS_COLUMNS = "position, stream, seq, count, prev_hash, hash, data, content"
# A stream's head (its last seq and hash) is part of what an append must write: reading it
# is how the next append is checked (expected_seq) and chained, and how streams are listed.
HEAD_UPSERT = (
    "INSERT INTO streams (stream, last_seq, last_hash, created) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (stream) DO UPDATE SET last_seq = excluded.last_seq, "
    "last_hash = excluded.last_hash"
)
USAGE = ev.Usage(prompt_tokens=1834, completion_tokens=57, total_tokens=1891, cached_tokens=1536)
SHORT_OUTPUT = (
    "tests/test_parser.py::test_escaped_quotes FAILED\n"
    "E   AssertionError: expected ['a\"b'] got ['a', 'b']\n"
    "tests/test_parser.py:41: in test_escaped_quotes\n"
    "1 failed, 118 passed in 0.84s\n"
)
AppendRow = tuple[int, int, int, int, bytes | None, bytes, bytes, bytes | None]
"""A row of ``appends`` as stored (``APPENDS_COLUMNS``)."""


# --- output ----------------------------------------------------------------------------------


def num(x: float) -> str:
    return f"{x:,.0f}"


# --- event generators ------------------------------------------------------------------------


def chat_events(n: int) -> list[ev.NewEvent]:
    """Alternate a short model response with a ~200-byte tool output."""
    out: list[ev.NewEvent] = []
    for i in range(n):
        body: ev.Body
        if i % 2 == 0:
            text = f"Running the parser tests again (attempt {i // 2})."
            body = ev.ModelResponded(text=text, finish_reason="stop", usage=USAGE)
        else:
            body = ev.ToolCallCompleted(
                call_id=f"call_{i:06d}", output=SHORT_OUTPUT, duration_ms=840.0
            )
        out.append(ev.NewEvent(body, conversation_id="conv-root", task_id=f"task-{i // 10}"))
    return out


def turn_events(conv: str, task: str, n: int, output: str) -> list[ev.NewEvent]:
    """One user task: plan, start, a tool call and its output, the answer, completion."""
    call = f"call-{task}"
    args = f'{{"path": "src/parser/module_{n % 50}.py", "start": 1, "end": 400}}'
    answer = f"Fixed bug #{n}: the tokenizer dropped escaped quotes; added a regression test."
    plan = ev.TaskPlan(
        task, conv, input_items=[ev.InputText(f"Please fix bug #{n} in the parser.")]
    )
    bodies: list[ev.Body] = [
        ev.TaskEnqueued(plan),
        ev.TaskStarted(),
        ev.ModelResponded(
            tool_calls=[ev.ToolCall(id=call, name="read_file", arguments=args)],
            finish_reason="tool_calls",
            usage=USAGE,
        ),
        ev.ToolCallRequested(call_id=call, tool="read_file", arguments=args, read_only=True),
        ev.ToolCallCompleted(call_id=call, output=output, duration_ms=3.5),
        ev.ModelResponded(text=answer, finish_reason="stop", usage=USAGE),
        ev.TaskCompleted(last_assistant_message=answer),
    ]
    return [ev.NewEvent(body, conversation_id=conv, task_id=task) for body in bodies]


def session_events(session: int) -> Iterator[ev.NewEvent]:
    """An endless session: its start, its root conversation, then turn after turn."""
    conv = f"conv-{session:03d}"
    yield ev.NewEvent(ev.SessionStarted(root_conversation_id=conv, model="gpt-5-mini"))
    yield ev.NewEvent(
        ev.ConversationOpened(user_instructions="Prefer small diffs."), conversation_id=conv
    )
    for turn in itertools.count(1):
        yield from turn_events(conv, f"task-{session:03d}-{turn:05d}", turn, SHORT_OUTPUT)


# --- 1. durable appends ----------------------------------------------------------------------


def ours_appends(path: Path, events: list[ev.NewEvent], per_commit: int) -> float:
    with ev.SqliteStore(path) as store:
        start = time.perf_counter()
        for seq in range(0, len(events), per_commit):
            store.append("session-1", events[seq : seq + per_commit], seq)
        return time.perf_counter() - start


def stored_rows(path: Path) -> tuple[list[AppendRow], list[tuple[str, int]]]:
    """The store's rows of ``appends`` as its file holds them, in position order, and its
    ``names`` (stream id, key)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(f"SELECT {APPENDS_COLUMNS} FROM appends ORDER BY position").fetchall()
        names = db.execute("SELECT name, key FROM names").fetchall()
    return rows, names


def raw_appends(path: Path, rows: list[AppendRow], names: list[tuple[str, int]]) -> float:
    """The floor: insert the stored rows (an append each) and move the stream's head, a
    commit each row."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        for name in ("appends", "names", "streams"):
            db.execute(_ddl(name))
        db.executemany("INSERT INTO names (name, key) VALUES (?, ?)", names)
        stream_of = {key: name for name, key in names}
        insert = f"INSERT INTO appends ({APPENDS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        created: dict[int, int] = {}
        heads = [  # after each row: (stream, last_seq, last_hash, created)
            (stream_of[r[1]], r[2], r[5], created.setdefault(r[1], r[0])) for r in rows
        ]
        start = time.perf_counter()
        for row, head in zip(rows, heads, strict=True):
            db.execute("BEGIN IMMEDIATE")
            db.execute(insert, row)
            db.execute(HEAD_UPSERT, head)
            db.execute("COMMIT")
        return time.perf_counter() - start


def append_rates(tmp: Path, name: str, n: int, per_commit: int) -> tuple[float, float]:
    """Median events/s of ours and raw over 5 interleaved repeats (which goes first
    alternates, so neither gains from a warmer disk), on fresh files."""
    events = chat_events(n)
    rows, names = stored_rows(_seeded(tmp / f"{name}-seed.db", events, per_commit))
    assert sum(r[3] for r in rows) == n and len(rows) == n // per_commit, (len(rows), n)
    ours: list[float] = []
    raw: list[float] = []
    for rep in range(5):
        order = ["ours", "raw"] if rep % 2 == 0 else ["raw", "ours"]
        for who in order:
            if who == "ours":
                ours.append(n / ours_appends(tmp / f"{name}-{rep}.db", events, per_commit))
            else:
                raw.append(n / raw_appends(tmp / f"{name}-{rep}-raw.db", rows, names))
    return statistics.median(ours), statistics.median(raw)


def _seeded(path: Path, events: list[ev.NewEvent], per_commit: int) -> Path:
    ours_appends(path, events, per_commit)
    return path


def bench_appends(tmp: Path, scale: int, profile: bool) -> None:
    singles, batches = 2000 // scale, 200 // scale
    lines: list[Line] = []
    for label, n, per in (
        (f"{singles:,} commits of 1 event", singles, 1),
        (f"{batches:,} commits of 100 events", batches * 100, 100),
    ):
        ours, raw = append_rates(tmp, f"append-{per}", n, per)
        lines.append((label, num(ours), num(raw), f"{ours / raw:.2f}x", ">= 0.90x"))
    note = (
        "raw: sqlite3 inserting the rows ours stored (a row of appends per append, its bytes "
        "as stored) and moving the stream's head row, a commit each; same pragmas and tables"
    )
    table("1. durable appends, events/s (WAL, synchronous=FULL; median of 5)", lines, note)
    if profile:  # appends run on the caller's thread: its profile is the whole of them
        events = chat_events(singles)
        profiled(
            f"ours, {singles:,} commits of 1 event",
            lambda: ours_appends(tmp / "append-profile.db", events, 1),
        )


def profiled(what: str, run: Callable[[], object]) -> None:
    """cProfile ``run``: the top 20 functions by own time, then plait's by cumulative time."""
    profiler = cProfile.Profile()
    profiler.runcall(run)
    print(f"\n-- cProfile of {what} (top 20 by own time)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    print(f"-- cProfile of {what} (plait's code, top 20 by cumulative time)")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(r"[/\\]plait[/\\]", 20)


# --- 2. full rebuild of the history projection -----------------------------------------------


def write_sessions(path: Path, total: int, sessions: int = 100, batch: int = 1000) -> None:
    streams = [session_events(s) for s in range(sessions)]
    heads = [0] * sessions
    with ev.SqliteStore(path, synchronous="OFF") as store:
        for i in range(total // batch):
            s = i % sessions
            store.append(f"session-{s:03d}", list(itertools.islice(streams[s], batch)), heads[s])
            heads[s] += batch


def rebuild_ours(path: Path, batch: int, project: bool = True) -> tuple[float, int]:
    """Seconds to fold every event into the history projection (or only read them), and count."""
    projection = HistoryProjection() if project else None
    with ev.SqliteStore(path) as store:
        start = time.perf_counter()
        n = 0
        state = projection.initial() if projection is not None else None
        for events in store.batches(batch=batch):
            if projection is not None:
                state = projection.fold(events, state)
            n += len(events)
        if getattr(state, "anomalies", None):
            print(f"  !! history anomalies: {state.anomalies[:3]}")
        return time.perf_counter() - start, n


ROWS_IN_ORDER = (
    "SELECT position, stream, seq, count, prev_hash, hash, data FROM appends ORDER BY position"
)
"""The columns of a row that reads take (``plait.events._stored.Packed``), as stored."""


def rebuild_raw(path: Path) -> tuple[float, int]:
    """Seconds to read every row of ``appends`` in position order, decompress it and decode
    its entries into typed ``Entry``s (as ``packing.unpack`` does), and the events decoded:
    the floor any reader of these rows pays. No hashing, no checks, no ``Event``s."""
    entries = msgspec.msgpack.Decoder(list[packing.Entry]).decode
    decompressed = packing.decompressed
    with contextlib.closing(sqlite3.connect(path)) as db:
        start = time.perf_counter()
        n = 0
        for _, _, _, count, _, _, data in db.execute(ROWS_IN_ORDER):
            n += len(entries(b"".join((b"\xdd", count.to_bytes(4, "big"), decompressed(data)))))
        return time.perf_counter() - start, n


def bench_rebuild(tmp: Path, scale: int, profile: bool) -> None:
    total, batch = 1_000_000 // scale, 2000
    path = tmp / "rebuild.db"
    start = time.perf_counter()
    write_sessions(path, total)
    setup = time.perf_counter() - start
    rebuild_raw(path)  # warm the page cache for both
    raw_s, raw_n = min(rebuild_raw(path) for _ in range(3))
    read_s, _ = min(rebuild_ours(path, batch, project=False) for _ in range(3))
    ours_s, ours_n = min(rebuild_ours(path, batch) for _ in range(3))
    assert ours_n == raw_n == total, (ours_n, raw_n, total)
    limit = 3.0 / scale
    table(
        f"2. full rebuild from {total:,} events in 100 sessions (setup {setup:.1f} s; best of 3)",
        [
            ("seconds", f"{ours_s:.2f}", f"{raw_s:.2f}", "", f"< {limit:g} s"),
            ("events/s", num(ours_n / ours_s), num(raw_n / raw_s), "", ""),
            ("raw_time / our_time", "", "", f"{raw_s / ours_s:.2f}x", ">= 0.80x"),
            (f"under {limit:g} s", "yes" if ours_s < limit else "NO", "", "", "yes"),
            (
                "reading alone (no fold), s",
                f"{read_s:.2f}",
                f"{raw_s:.2f}",
                f"{raw_s / read_s:.2f}x",
                "",
            ),
        ],
        f"ours: store.batches + HistoryProjection.fold, batch={batch}; raw: the same rows of "
        "appends (SELECT in position order), zstd-decompressed with plait's dictionary, entries "
        "msgspec-decoded typed (list[Entry]); no hashing, checks or Events",
    )
    if profile:  # reads run on the caller's thread: its profile is the whole of them
        profiled("ours, one rebuild", lambda: rebuild_ours(path, batch))


# --- 3. bytes on disk per turn ---------------------------------------------------------------


def big_outputs(count: int = 5, size: int = 50 * 1024) -> list[str]:
    """``count`` distinct ~``size``-byte tool outputs (file listings with line numbers)."""
    outputs: list[str] = []
    for k in range(count):
        lines = (
            f"{i:5d}  def handler_{k}_{i}(request):  # variant {k}\n" for i in range(size // 40)
        )
        outputs.append("".join(lines)[:size])
    return outputs


def disk_bytes(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def store_stats(path: Path) -> tuple[int, int, int, int]:
    """Blob rows, blob bytes, bytes of the rows of ``appends`` (data + prev_hash + hash), and
    bytes of the small content those rows keep, in the file."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        blobs, blob_bytes = db.execute("SELECT count(*), sum(length(data)) FROM blobs").fetchone()
        append_bytes, content_bytes = db.execute(
            "SELECT sum(length(data) + coalesce(length(prev_hash), 0) + length(hash)), "
            "coalesce(sum(length(content)), 0) FROM appends"
        ).fetchone()
    return int(blobs), int(blob_bytes), int(append_bytes), int(content_bytes)


def write_turns(path: Path, turns: int, marks: list[int]) -> tuple[list[Line], int]:
    """Append ``turns`` turns to one stream; return a line per mark and the naive total."""
    outputs = big_outputs()
    lines: list[Line] = []
    naive = prev_size = prev_turn = 0
    with ev.SqliteStore(path) as store:
        for turn in range(1, turns + 1):
            output = outputs[turn % len(outputs)]
            naive += len(output)
            events = turn_events("conv-root", f"task-{turn:05d}", turn, output)
            store.append("session-1", events, (turn - 1) * len(events))
            if turn in marks:
                size = disk_bytes(path)
                ratio = f"{size / naive:.3f}x"
                lines.append(
                    (f"bytes/turn @ {turn:,}", num(size / turn), num(naive / turn), ratio, "<< 1x")
                )
                since = f"  growth/turn, turns {prev_turn + 1:,}-{turn:,}"
                lines.append((since, num((size - prev_size) / (turn - prev_turn)), "", "", "flat"))
                prev_size, prev_turn = size, turn
    return lines, naive


def bench_disk(tmp: Path, scale: int) -> None:
    turns = 1000 // scale
    path = tmp / "disk.db"
    lines, naive = write_turns(path, turns, [m // scale for m in (100, 250, 500, 1000)])
    blobs, blob_bytes, append_bytes, content_bytes = store_stats(path)
    lines += [
        ("appends: data+prev_hash+hash bytes/turn", num(append_bytes / turns), "", "", "small"),
        ("appends: content bytes/turn", num(content_bytes / turns), "", "", "small"),
        ("blob rows", str(blobs), num(turns), "", "5"),
        ("blob bytes", num(blob_bytes), num(naive), f"{blob_bytes / naive:.3f}x", ""),
        ("file bytes (db + wal)", num(disk_bytes(path)), num(naive), "", ""),
    ]
    table(
        f"3. bytes on disk, one stream of {turns:,} turns, 5 distinct ~50 KiB outputs",
        lines,
        "ours: db + wal after wal_checkpoint(TRUNCATE); raw: naive, sum of len(output) inline",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="sizes / 10, for a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile appends and rebuild")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="plait-bench-") as tmp:
        bench_appends(Path(tmp), scale, args.profile)
        bench_rebuild(Path(tmp), scale, args.profile)
        bench_disk(Path(tmp), scale)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
