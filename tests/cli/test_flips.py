"""Single bytes flipped across a whole SQLite log, as a failing disk would: ``bench/flips.py``'s
run, with a few flips instead of a hundred and twenty.

A session is recorded; flips are drawn from every page of its file and sorted by the rows they
change; a few in event data, hashes and the columns that find an event (stream, seq, type, v,
position), and a few elsewhere, go through every reader of the command line (docs/event-log.md,
"Checked reads"). None may print a traceback or hang; none in an event may leave a reader
silent (exit 0 as if nothing were wrong): each is detected, one line naming the damage.
"""

from __future__ import annotations

import random

import pytest
from support import load_bench

from plait.testing import ScriptedModelServer, Step

PER_REGION = {"event data": 1, "event hash": 1, "event envelope": 2}
"""Flips in an event's row, by what they change: every reader must detect each."""
ANYWHERE = {"detected", "clean error", "silent", "unaffected"}
OTHERS = 1
"""Flips outside an event's row (blob rows, the streams table, indexes, free space...)."""


flips = load_bench("flips")


Flip = tuple[int, int, str]
"""Offset, xor mask, region (as ``bench/flips.py`` names them)."""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[Flip, str], tuple[str, str]]:
    """(flip, reader) -> (outcome, the reader's last line), for the flips chosen here."""
    work = tmp_path_factory.mktemp("flips")
    (work / "record").mkdir()
    sid = flips.record(work / "record" / "plait.db")
    file = flips.File(work / "record" / "plait.db", work)
    candidates: list[Flip] = flips.choose(file, 60, random.Random(20))
    chosen = [f for region, n in PER_REGION.items() for f in of(candidates, region)[:n]]
    chosen += [f for f in candidates if f[2] not in PER_REGION][:OTHERS]
    with ScriptedModelServer([Step(text="Fine.")] * (len(chosen) * 2 + 20)) as server:
        bench = flips.Bench(work, sid, server.base_url, timeout=60)
        for reader in flips.READERS:
            code, out, err = bench.run(reader, file.data, f"base-{reader}")
            assert code == 0, f"{reader} fails on the unflipped file:\n{out}{err}"
            bench.baseline[reader] = (code, out, len(err.strip().splitlines()))
        found = flips.run_all(bench, file, chosen, jobs=2)
    return {(chosen[i], reader): outcome for (i, reader), outcome in found.items()}


def of(candidates: list[Flip], region: str) -> list[Flip]:
    return [flip for flip in candidates if flip[2] == region]


def test_no_flip_is_a_traceback_or_a_hang_and_every_reader_detects_one_in_an_event(
    outcomes: dict[tuple[Flip, str], tuple[str, str]],
) -> None:
    assert {flip[2] for flip, _ in outcomes} >= set(PER_REGION)
    bad = []
    for ((offset, mask, region), reader), (outcome, line) in sorted(outcomes.items()):
        # Elsewhere a flip may change nothing a reader shows (a stream's creation time, a
        # blob row's size): only a traceback, a hang or more than one line are wrong there.
        allowed = {"detected"} if region in PER_REGION else ANYWHERE
        if outcome not in allowed:
            bad.append(f"--only {offset}:{mask:#04x} ({region}) plait {reader}: {outcome}: {line}")
    assert not bad, "\n".join(bad)
