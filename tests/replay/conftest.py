"""Every replay test also checks that no hold of the replay's store gave up waiting for a
server's report: one that did means the driver never fed in what the program waited for
(docs/replay.md#what-replay-feeds-in), and the replay went on late, or wrong."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_hold_gives_up(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    told = [r.getMessage() for r in caplog.get_records("call")]
    assert [m for m in told if "which was not fed in" in m] == []
