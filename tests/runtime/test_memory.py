"""A large prompt or tool result costs a few times its size in memory, not ten:
``bench/memory.py``'s cases, at 20 MB each, in fresh processes (its docstring says how).

Before the copies on the way to the store were removed, a 20 MB tool result peaked at 9.7 times
its size above the process's baseline, and a prompt at 8.8 times; the bench's goal is 3 times.
The bound here is 5 times: a regression back towards ten fails, the measure's own spread does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import load_bench

BOUND = 5.0
"""The most a case may peak above its baseline, in times the item's size."""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads /proc peaks")
@pytest.mark.parametrize("case", ["prompt", "tool"])
def test_a_large_item_costs_a_few_times_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    bench = load_bench("memory")
    size = 20 * bench.MB
    found = bench.measure(case, size, str(tmp_path / "plait.db"), False)
    ratio = (found["peak"] - found["baseline"]) / size
    assert ratio <= BOUND, f"{case}: peak {ratio:.2f}x the item above the baseline"
