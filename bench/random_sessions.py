"""Randomly scripted sessions through the real runtime, many of them: the soak run of
``tests/actors/test_random_sessions.py``, whose check it runs (the suite runs 50 sessions).

Each session's model replies are drawn at random (text, one or two tool calls, an HTTP 500 now
and then); after each session its log must verify, its histories be valid, one task run at a
time, every event name its conversation and task, and the live projections equal a rebuild
from the log. A failed check raises at the session it found; else one table of counts.

    python bench/random_sessions.py                    # 1,000 sessions, seed 20261123
    python bench/random_sessions.py --sessions 200 --seed 7
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from report import table

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "actors")]  # the check and its helpers (scripted.py)

import test_random_sessions as check  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=check.SEED)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        completed, failed = check.check_random_sessions(
            args.sessions, args.seed, Path(tmp) / "random.db"
        )
        took = time.perf_counter() - start
    table(
        f"{args.sessions} random sessions, seed {args.seed}: every log consistent",
        [
            ("tasks completed", str(completed), "", "", f"> {args.sessions // 4}"),
            ("tasks failed on the model's errors", str(failed), "", "", "> 0"),
            ("seconds", f"{took:.1f}", "", "", ""),
        ],
    )
    sys.exit(0 if completed > args.sessions // 4 and failed > 0 else 1)


if __name__ == "__main__":
    main()
