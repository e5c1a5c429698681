"""PostgreSQL appends: round trips and time per append, beside a raw INSERT + COMMIT.

Run from the repository root: ``python bench/pg_appends.py [--url URL] [--appends N]``.
Every variant appends N groups of 1-4 small events to one stream, fenced by its lease epoch
(taken with ``acquire_lease`` first), in a schema of its own that is dropped at the end:

* ``append``, ``append_prepared``: ``PostgresStore`` as it is now; ``head read first``:
  ``append`` when the store did not write the stream's head itself (another process did, or it
  just opened). (bench/pg_concurrency.py measures many writers at once.)
* ``raw``: psycopg alone, one ``INSERT ... SELECT FROM unnest`` of the same rows per append
  in autocommit (the commit rides with it): the floor of a durable append over this connection.

Round trips are counted from libpq's protocol trace of one append (each run of messages the
client sends before it reads an answer is one). Times: median and p99 per append, the median
of 3 repeats; within a repeat the variants take turns, one append each.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from report import Line, table

from plait.events import GENESIS_HASH, Body, EventStore, TokensCounted, TurnStarted, Usage
from plait.events.stores import PostgresStore

URL = os.environ.get("PLAIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
USAGE = Usage(prompt_tokens=1834, completion_tokens=57, total_tokens=1891, cached_tokens=1536)


def group(i: int) -> list[Body]:
    """The i-th append's events: 1 to 4 small ones."""
    return [
        TurnStarted(turn=i),
        TokensCounted(usage=USAGE),
        TurnStarted(turn=-i),
        TurnStarted(turn=i + 1),
    ][: 1 + i % 4]


@contextlib.contextmanager
def traced(conn: psycopg.Connection[Any]) -> Iterator[list[int]]:
    """Yield a list that holds, after the block, the round trips ``conn`` made in it."""
    out: list[int] = []
    with tempfile.TemporaryFile("w+") as f:
        conn.pgconn.trace(f.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield out
        finally:
            conn.pgconn.untrace()
        f.seek(0)
        sides = [line.split("\t", 1)[0] for line in f if line[:1] in "FB"]
    out.append(sum(1 for a, b in itertools.pairwise(sides) if a == "F" and b == "B"))


def run_store(
    store: PostgresStore, n: int, trips: list[int], prepared: bool, forget: bool = False
) -> Iterator[float]:
    """Yield the times of ``n`` fenced appends to a fresh stream; one's trips to ``trips``."""
    stream = f"s-{uuid.uuid4().hex[:8]}"
    epoch = store.leases.acquire(stream, "bench", 600).epoch
    seq, prev = 0, GENESIS_HASH
    for i in range(n):
        bodies = group(i)
        if forget:  # as when another object wrote the head: ``append`` reads it first
            store._heads.clear()
        t0 = time.perf_counter()
        if prepared:
            made = store.prepare(stream, bodies, seq, prev)
            if i == n // 2:
                with traced(store._link._conn) as counted:
                    events = store.append_prepared(stream, made, epoch=epoch)
                trips[:] = counted
            else:
                events = store.append_prepared(stream, made, epoch=epoch)
        elif i == n // 2:
            with traced(store._link._conn) as counted:
                events = store.append(stream, bodies, seq, epoch=epoch)
            trips[:] = counted
        else:
            events = store.append(stream, bodies, seq, epoch=epoch)
        yield time.perf_counter() - t0
        seq, prev = events[-1].seq, events[-1].hash


def run_raw(
    conn: psycopg.Connection[Any], table_name: str, n: int, trips: list[int]
) -> Iterator[float]:
    """Yield the times of ``n`` single-statement inserts of rows of the same shape, each its
    own commit; one insert's trips to ``trips``."""
    store_like = EventStore.prepare  # the same bytes as ours: encode with a throwaway store
    maker = PostgresStore.__new__(PostgresStore)
    EventStore.__init__(maker)
    stream = f"s-{uuid.uuid4().hex[:8]}"
    query = (
        f"INSERT INTO {table_name} (position, stream, seq, type, v, data, hash) "
        "SELECT * FROM unnest(%s::int8[], %s::text[], %s::int8[], %s::text[], %s::int4[], "
        "%s::bytea[], %s::bytea[])"
    )
    found = conn.execute(f"SELECT coalesce(max(position), 0) FROM {table_name}").fetchone()
    seq, prev, position = 0, GENESIS_HASH, int(found[0]) if found else 0
    for i in range(n):
        t0 = time.perf_counter()
        made = store_like(maker, stream, group(i), seq, prev)
        cols = [list(col) for col in zip(*made.rows, strict=True)]
        k = len(made.rows)
        params = (list(range(position + 1, position + k + 1)), [stream] * k, *cols)
        if i == n // 2:
            with traced(conn) as counted:
                conn.execute(query, params)
            trips[:] = counted
        else:
            conn.execute(query, params)
        yield time.perf_counter() - t0
        seq, prev, position = seq + k, made.rows[-1][4], position + k


def ms(x: float) -> str:
    return f"{x * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--url", default=URL)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--no-wait-flush",
        action="store_true",
        help="synchronous_commit=off on every connection: round trips and work without the "
        "commit's WAL flush (which others' disk load makes noisy)",
    )
    args = parser.parse_args()
    try:
        raw = psycopg.connect(args.url, autocommit=True)
    except psycopg.OperationalError as exc:
        parser.error(f"PostgreSQL at {args.url} does not answer: {str(exc).splitlines()[0]}")
    schemas = {name: f"plait_bench_{name}_{uuid.uuid4().hex[:8]}" for name in ("after", "raw")}
    after = PostgresStore(args.url, schema=schemas["after"])
    cold = PostgresStore(args.url, schema=schemas["after"])  # its heads forgotten each time
    raw_table = f'"{schemas["raw"]}".events'
    if args.no_wait_flush:
        for conn in (after._link._conn, cold._link._conn, raw):
            conn.execute("SET synchronous_commit = off")
    raw.execute(f'CREATE SCHEMA "{schemas["raw"]}"')
    raw.execute(
        f"CREATE TABLE {raw_table} (position BIGINT PRIMARY KEY, stream TEXT NOT NULL, "
        "seq BIGINT NOT NULL, type TEXT NOT NULL, v INT NOT NULL, data BYTEA NOT NULL, "
        "hash BYTEA NOT NULL, UNIQUE (stream, seq))"
    )
    results: dict[str, list[tuple[float, float]]] = {}
    trips: dict[str, list[int]] = {}
    n = args.appends
    variants: dict[str, Callable[[list[int]], Iterator[float]]] = {
        "append": lambda t: run_store(after, n, t, False),
        "append, head read first": lambda t: run_store(cold, n, t, False, True),
        "append_prepared": lambda t: run_store(after, n, t, True),
        "raw": lambda t: run_raw(raw, raw_table, n, t),
    }
    try:
        for _ in range(args.repeats):
            # One append of each variant in turn: a load that comes and goes (others' benchmarks
            # on 2 cores) falls on all of them alike.
            runs = {name: make(trips.setdefault(name, [0])) for name, make in variants.items()}
            times: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(n):
                for name, run in runs.items():
                    times[name].append(next(run))
            for name, each in times.items():
                each.sort()
                results.setdefault(name, []).append(
                    (statistics.median(each), each[int(len(each) * 0.99)])
                )
    finally:
        after.close()
        cold.close()
        for schema in schemas.values():
            raw.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        raw.close()
    floor = statistics.median(m for m, _ in results["raw"])
    lines: list[Line] = []
    for name in variants:
        med = statistics.median(m for m, _ in results[name])
        p99 = statistics.median(p for _, p in results[name])
        lines.append((f"{name}: median", ms(med), ms(floor), f"{med / floor:.2f}x", ""))
        lines.append((f"{name}: p99", ms(p99), "", "", ""))
        lines.append((f"{name}: round trips", str(trips[name][0]), str(trips["raw"][0]), "", ""))
    table(
        f"PostgreSQL fenced appends of 1-4 events ({args.appends} a run, median of {args.repeats})",
        lines,
        "raw: one INSERT ... SELECT FROM unnest of the same rows, autocommit"
        + ("; commits not waiting for their WAL flush" if args.no_wait_flush else ""),
    )


if __name__ == "__main__":
    main()
