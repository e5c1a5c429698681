"""Sessions recorded by an earlier plait replay without a difference, forever.

The logs in ``golden/`` were recorded once (``make_golden.py``) and are never rewritten: a
change to the runtime that makes one of them replay differently changes what users' old
sessions mean, and must be a deliberate, documented one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plait.events.stores.sqlite import SqliteStore
from plait.replay import replay

GOLDEN = Path(__file__).with_name("golden")
MANIFEST = json.loads((GOLDEN / "v1-sessions.json").read_text())


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> SqliteStore:
    copy = tmp_path_factory.mktemp("golden") / "v1-sessions.sqlite"
    shutil.copy(GOLDEN / "v1-sessions.sqlite", copy)  # the committed file stays untouched
    return SqliteStore(copy)


@pytest.mark.parametrize("session", sorted(MANIFEST["sessions"]))
def test_a_recorded_session_replays_clean(store: SqliteStore, session: str) -> None:
    assert store.verify(session).ok
    result = replay(store, session, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()
    assert result.events == result.total == len(store.read(session))


def test_a_changed_program_diverges_where_expected(store: SqliteStore) -> None:
    changed = MANIFEST["changed_program"]
    result = replay(
        store,
        changed["session"],
        max_interrupt_chain_depth=changed["max_interrupt_chain_depth"],
        timeout=2,
    )
    assert result.divergence is not None
    assert result.divergence.seq == changed["diverges_at_seq"]
    assert result.divergence.expected.split()[0] == changed["expected"]
    assert result.divergence.got.split()[0] == changed["got"]
    assert result.events == changed["diverges_at_seq"] - 1
