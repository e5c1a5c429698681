"""PostgreSQL appends of many sessions at once, beside raw inserts on the same server.

Run from the repository root: ``python bench/pg_concurrency.py [--url URL] [--writers 1,2,4]
[--seconds 4] [--processes] [--rounds 1]``. For each K, K threads append for the same time,
each with a connection of its own to a session of its own, one small event per append, fenced
by its lease epoch as an owner appends; then K threads do the same with raw psycopg: one
``INSERT`` of a row of the same bytes and its ``COMMIT``. Each variant has a schema of its own,
dropped at the end. Threads of one Python process share its interpreter lock, so past a few
writers they measure the client's CPU as much as the database; ``--processes`` runs each writer
in a process of its own (as workers of a service run), for both variants.

While plait's writers run, a sampler reads ``pg_stat_activity`` every 20 ms and counts what
their backends wait on (``Lock:advisory``, ``IO:WALSync``..., ``CPU`` for none): the average
number of backends in each state says where appends queue. Sessions that wait on each other
show as lock waits that grow with K, and appends/s that stay flat while raw inserts grow. The
WAL each variant wrote per append (``pg_current_wal_insert_lsn`` before and after) says how
much more an append writes than a raw insert: its lease check, head and index rows.

On a machine shared with other work the disk's speed swings from one second to the next, and
``ours`` and ``raw`` run one after the other: ``--rounds N`` runs the pair N times in turn for
each K and compares their sums, so that a slow spell falls on both
(docs/scale.md#what-bounds-appends-here).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from report import Line, table

from plait.events import GENESIS_HASH, EventStore, TurnStarted
from plait.events.stores import PostgresStore

URL = os.environ.get("PLAIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
APP = os.environ.setdefault("PLAIT_BENCH_APP", f"plait-bench-{uuid.uuid4().hex[:6]}")
"""The ``application_name`` of plait's writers, which the sampler looks for (the same in the
writers' processes, which inherit the environment)."""
GOALS = {1: 0.6, 16: 0.8}
"""The ratio to raw each K should reach (issue: one round trip alone; no global serial point)."""


def run_threads(k: int, seconds: float, make: Callable[[int], Callable[[], None]]) -> int:
    """Run ``k`` threads, each calling the append ``make(i)`` gives for ``seconds``; return how
    many appends they made in all."""
    appenders = [make(i) for i in range(k)]  # connected before the clock starts
    counts = [0] * k
    start = threading.Barrier(k + 1)
    stop = threading.Event()

    def work(i: int) -> None:
        append = appenders[i]
        start.wait()
        while not stop.is_set():
            append()
            counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(k)]
    for thread in threads:
        thread.start()
    start.wait()
    time.sleep(seconds)  # the measured stretch
    stop.set()
    for thread in threads:
        thread.join()
    return sum(counts)


def run_processes(k: int, seconds: float, kind: str, url: str, target: str) -> int:
    """Run ``k`` processes, each appending as ``kind``'s writer (``plait`` or ``raw``, into
    ``target``) for ``seconds``; return how many appends they made in all."""
    spawn = multiprocessing.get_context("spawn")
    start, counts = spawn.Barrier(k + 1), spawn.Queue()
    processes = [
        spawn.Process(target=_writer_process, args=(kind, url, target, i, seconds, start, counts))
        for i in range(k)
    ]
    for process in processes:
        process.start()
    start.wait(120)  # every writer connected: the clock starts
    total = sum(counts.get(timeout=seconds + 120) for _ in processes)
    for process in processes:
        process.join()
    return int(total)


def _writer_process(
    kind: str, url: str, target: str, i: int, seconds: float, start: Any, counts: Any
) -> None:
    stores: list[PostgresStore] = []
    conns: list[psycopg.Connection[Any]] = []
    make = plait_writer(url, target, stores) if kind == "plait" else raw_writer(url, target, conns)
    append, appended = make(i), 0
    start.wait(120)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        append()
        appended += 1
    counts.put(appended)
    for closing in (*stores, *conns):
        closing.close()


def plait_writer(url: str, schema: str, stores: list[PostgresStore]) -> Callable[[int], Any]:
    """A maker of appenders: a store of its own each, one session, fenced appends of one event."""

    def make(i: int) -> Callable[[], None]:
        store = PostgresStore(f"{url}?application_name={APP}", schema=schema)
        stores.append(store)
        stream = f"s-{i}-{uuid.uuid4().hex[:8]}"
        epoch = store.leases.acquire(stream, f"bench-{i}", 600).epoch
        seq = 0

        def append() -> None:
            nonlocal seq
            seq = store.append(stream, [TurnStarted(turn=seq)], seq, epoch=epoch)[-1].seq

        return append

    return make


def raw_writer(url: str, table_name: str, conns: list[psycopg.Connection[Any]]) -> Any:
    """A maker of appenders: a connection of its own each, one row and its commit per append."""
    maker = PostgresStore.__new__(PostgresStore)
    EventStore.__init__(maker)
    (row,) = EventStore.prepare(maker, "s", [TurnStarted(turn=1)], 0, GENESIS_HASH).rows
    data, digest = row[3], row[4]

    def make(i: int) -> Callable[[], None]:
        conn = psycopg.connect(url, autocommit=True)
        conns.append(conn)
        stream = f"s-{i}-{uuid.uuid4().hex[:8]}"
        query = f"INSERT INTO {table_name} (stream, seq, data, hash) VALUES (%s, %s, %s, %s)"
        seq = 0

        def append() -> None:
            nonlocal seq
            seq += 1
            conn.execute(query, (stream, seq, data, digest))

        return append

    return make


class Sampler:
    """Counts, every 20 ms while it is entered (again and again: the counts add up), what
    plait's writers' backends wait on."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.samples = 0
        self.waits: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread()

    def __enter__(self) -> Sampler:
        self._stop.clear()
        conn = psycopg.connect(self._url, autocommit=True)
        self._thread = threading.Thread(target=self._run, args=(conn,))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, conn: psycopg.Connection[Any]) -> None:
        query = (
            "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
            "WHERE application_name = %s AND state = 'active'"
        )
        with conn:
            while not self._stop.wait(0.02):
                rows = conn.execute(query, (APP,)).fetchall()
                self.samples += 1
                self.waits.update(str(row[0]) for row in rows)

    def summary(self) -> str:
        """The average number of backends in each state, the most common first."""
        n = max(self.samples, 1)
        return ", ".join(f"{name} {count / n:.1f}" for name, count in self.waits.most_common(4))


def wal(admin: psycopg.Connection[Any]) -> int:
    """The server's WAL insert position, in bytes."""
    found = admin.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert found is not None
    return int(found[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--url", default=URL)
    parser.add_argument("--writers", default="1,2,4,8,16", help="the K to run, comma-separated")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each K appends")
    parser.add_argument(
        "--processes", action="store_true", help="each writer a process, not a thread"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="how many times each K runs both, in turn (their sums compared: on a machine "
        "shared with other work, a slow spell of the disk then falls on both)",
    )
    args = parser.parse_args()
    try:
        admin = psycopg.connect(args.url, autocommit=True)
    except psycopg.OperationalError as exc:
        parser.error(f"PostgreSQL at {args.url} does not answer: {str(exc).splitlines()[0]}")
    ours, raw = (f"plait_bench_{name}_{uuid.uuid4().hex[:8]}" for name in ("ours", "raw"))
    raw_table = f'"{raw}".events'
    admin.execute(f'CREATE SCHEMA "{raw}"')
    admin.execute(
        f"CREATE TABLE {raw_table} (stream TEXT NOT NULL, seq BIGINT NOT NULL, "
        "data BYTEA NOT NULL, hash BYTEA NOT NULL, PRIMARY KEY (stream, seq))"
    )
    PostgresStore(args.url, schema=ours).close()  # its tables made once, before the clock
    lines: list[Line] = []
    waits: list[str] = []
    stores: list[PostgresStore] = []
    conns: list[psycopg.Connection[Any]] = []
    try:
        for k in (int(part) for part in args.writers.split(",")):
            made = floor = ours_bytes = raw_bytes = 0
            sampler = Sampler(args.url)
            for _ in range(args.rounds):
                start = wal(admin)
                with sampler:
                    if args.processes:
                        made += run_processes(k, args.seconds, "plait", args.url, ours)
                    else:
                        made += run_threads(k, args.seconds, plait_writer(args.url, ours, stores))
                middle = wal(admin)
                if args.processes:
                    floor += run_processes(k, args.seconds, "raw", args.url, raw_table)
                else:
                    floor += run_threads(k, args.seconds, raw_writer(args.url, raw_table, conns))
                ours_bytes, raw_bytes = ours_bytes + middle - start, raw_bytes + wal(admin) - middle
                for closing in (*stores, *conns):
                    closing.close()
                stores.clear()
                conns.clear()
            seconds = args.seconds * args.rounds
            ours_wal, raw_wal = ours_bytes / made, raw_bytes / floor
            ratio = made / floor
            goal = GOALS.get(k)
            writers = f"{k} writer{'s' if k > 1 else ''}"
            lines.append(
                (
                    f"{writers}: appends/s",
                    f"{made / seconds:,.0f}",
                    f"{floor / seconds:,.0f}",
                    f"{ratio:.2f}x",
                    "" if goal is None else f"≥ {goal}x {'met' if ratio >= goal else 'not met'}",
                )
            )
            waits.append(
                f"   {writers:>10}: WAL per append {ours_wal:,.0f} B (raw {raw_wal:,.0f} B); "
                f"backends waiting on average: {sampler.summary()}"
            )
    finally:
        for schema in (ours, raw):
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.close()
    each = "process" if args.processes else "thread"
    table(
        f"PostgreSQL appends of K sessions at once, one event each, a {each} per writer, "
        f"{args.seconds:g} s per K" + (f", {args.rounds} rounds" if args.rounds > 1 else ""),
        lines,
        "raw: one INSERT of a row of the same bytes and its COMMIT, a connection per writer",
    )
    print("\n".join(waits))


if __name__ == "__main__":
    main()
