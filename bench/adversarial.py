"""An insider forges signed sessions on SQLite and PostgreSQL: how many does verify catch?

Issue #33's audit (docs/event-log.md#threat-model). On each store, ``--sessions`` rounds of
honest signed sessions are recorded through the real runtime against ``ScriptedModelServer``
(``tests/signed_sessions.py``: function tool calls, MCP tool calls over streamable HTTP, a
``conv_create`` hand-off, a fork resumed and one not, and one cut by a crash after its second
signed task, its last events unsigned). Then every forgery of ``tests/forgeries.py`` is made
on every session it applies to, with the insider's raw SQL (``tests/insider.py``: the msgpack
decoded and changed, the chain re-hashed consistently, positions kept dense, the head row
set), verified with the public key and the witness of the latest signed heads, and undone.
Printed, a row per store and forgery: tries (sessions forged), detected (verify failed),
silent (verify said ok), false alarms (another, untouched session of the store that failed
to verify meanwhile, checked after each round's first forgery), and, of the forgeries the
public key alone should tell, those it does not with the witness left out; the ``honest``
row is the untouched store. Then the silent cases (the first two of each row): store,
forgery, session and what verify said. Exit 1 if anything is silent or a false alarm.
``tests/events/test_forgeries.py`` runs the same forgeries on one round.

    python bench/adversarial.py                    # 3 rounds (18 sessions) per store, ~50 s
    python bench/adversarial.py --sessions 1 --store sqlite
    python bench/adversarial.py --postgres postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.append(sys.path.pop(0))  # bench/mcp.py is named like the mcp package
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the insider and its forgeries
from forgeries import FORGERIES
from pg_server import problem
from scripted import HttpServer
from signed_sessions import Lab, World, record_honest

POSTGRES = os.environ.get("PLAIT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Row:
    """One store's counts for one forgery (or for the honest store)."""

    store: str
    forgery: str
    tries: int = 0
    detected: int = 0
    silent: int = 0
    false_alarms: int = 0
    key_silent: int | None = None
    """Of the forgeries the public key alone should tell, those it did not (the witness
    left out); ``None`` for those only the witness can tell."""
    said: list[str] = field(default_factory=list)
    """For each silent case: the session and what verify said."""


def run_store(backend: str, where: Path, postgres: str, rounds: int, mcp_url: str) -> list[Row]:
    """Record the honest sessions in a new store of ``backend``, forge each, count."""
    world = World.create(backend, where, postgres)
    try:
        world = record_honest(world, mcp_url, rounds)
        with Lab(world) as lab:
            honest = Row(backend, "honest (none)")
            for session in world.sessions.values():
                outcome = lab.check(session)
                honest.tries += 1
                honest.false_alarms += not outcome.ok
                if not outcome.ok:
                    honest.said.append(f"{session}: {outcome.reason}")
            rows = [honest]
            firsts = {s for name, s in world.sessions.items() if name.endswith("-1")}
            for forgery in FORGERIES:
                row = Row(backend, forgery.name)
                for session in world.sessions.values():
                    # Every other session is verified after the first forgery of each kind
                    # (after each, the cost would grow as the square of the sessions).
                    attempt = lab.attempt(forgery, session, others=session in firsts)
                    if attempt is None:
                        continue
                    row.tries += 1
                    row.false_alarms += len(attempt.false_alarms)
                    if attempt.false_alarms:
                        row.said.append(f"{session}: forging it flagged {attempt.false_alarms}")
                    if attempt.outcome.ok:
                        row.silent += 1
                        row.said.append(f"{session}: {attempt.outcome.reason}")
                    else:
                        row.detected += 1
                    if attempt.key_only is not None:
                        row.key_silent = (row.key_silent or 0) + attempt.key_only.ok
                        if attempt.key_only.ok:
                            said = attempt.key_only.reason
                            row.said.append(f"{session}: without the witness: {said}")
                rows.append(row)
            return rows
    finally:
        world.drop()


def table(rows: list[Row]) -> str:
    """The rows as one aligned table, with a total per store and for all."""
    totals = []
    for store in dict.fromkeys(r.store for r in rows):
        mine = [r for r in rows if r.store == store]
        totals.append(_total(store, mine))
    if len(totals) > 1:
        totals.append(_total("all", rows))
    heads = ["store", "forgery", "tries", "detected", "silent (0)", "false alarms (0)"]
    heads.append("silent, key only (0)")
    cells = [heads] + [
        [
            r.store,
            r.forgery,
            str(r.tries),
            str(r.detected),
            str(r.silent),
            str(r.false_alarms),
            "-" if r.key_silent is None else str(r.key_silent),
        ]
        for r in [*rows, *totals]
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(heads))]
    return "\n".join(
        " | ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in cells
    )


def _total(store: str, rows: list[Row]) -> Row:
    forged = [r for r in rows if not r.forgery.startswith("honest")]
    return Row(
        store,
        "total",
        sum(r.tries for r in forged),
        sum(r.detected for r in forged),
        sum(r.silent for r in forged),
        sum(r.false_alarms for r in rows),
        sum(r.key_silent or 0 for r in forged),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sessions", type=int, default=3, help="rounds of the four kinds of session (default 3)"
    )
    parser.add_argument(
        "--store",
        action="append",
        choices=["sqlite", "postgres"],
        help="repeatable (default: both)",
    )
    parser.add_argument(
        "--postgres", default=POSTGRES, help="the PostgreSQL server (default PLAIT_TEST_POSTGRES)"
    )
    args = parser.parse_args()
    if "postgres" in (args.store or ["postgres"]) and (found := problem(args.postgres)):
        parser.error(f"PostgreSQL at {args.postgres} does not answer: {found.splitlines()[0]}")
    rows: list[Row] = []
    started = time.monotonic()
    tools = HttpServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend in args.store or ["sqlite", "postgres"]:
                where = Path(tmp) / backend
                rows += run_store(backend, where, args.postgres, args.sessions, tools.url)
    finally:
        tools.close()
    print(table(rows))
    print(f"\n{time.monotonic() - started:.0f} s")
    bad = [r for r in rows if r.silent or r.false_alarms or r.key_silent]
    for row in bad:  # the first two cases of each, for the report
        more = f" (and {len(row.said) - 2} more)" if len(row.said) > 2 else ""
        for said in row.said[:2]:
            print(f"{row.store} | {row.forgery} | {said}")
        if more:
            print(f"{row.store} | {row.forgery} |{more}")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
