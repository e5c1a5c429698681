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

from plait.events import SessionResumed, TurnAborted
from plait.events.stores import SqliteStore
from plait.replay import replay

GOLDEN = Path(__file__).with_name("golden")
MANIFESTS = {
    path.name.removesuffix(".json"): json.loads(path.read_text())
    for path in sorted(GOLDEN.glob("*-sessions.json"))
}
SESSIONS = [(name, session) for name, m in MANIFESTS.items() for session in sorted(m["sessions"])]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SqliteStore]:
    copies = {}
    for name in MANIFESTS:
        copy = tmp_path_factory.mktemp("golden") / f"{name}.sqlite"
        shutil.copy(GOLDEN / f"{name}.sqlite", copy)  # the committed file stays untouched
        copies[name] = SqliteStore(copy)
    return copies


def test_every_recorded_set_is_here() -> None:
    assert {"v1-sessions", "v2-sessions", "v3-sessions"} <= set(MANIFESTS)


def test_a_takeover_is_marked_and_every_abort_has_its_cause(
    stores: dict[str, SqliteStore],
) -> None:
    events = stores["v3-sessions"].read("g6-1")
    [marker] = [e.body for e in events if isinstance(e.body, SessionResumed)]
    aborts = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert marker.crashed_task_id == "g6-3" and marker.pending == 1
    assert [(a.reason, a.cause) for a in aborts] == [("crashed", "crash"), ("interrupted", "close")]


@pytest.mark.parametrize(("name", "session"), SESSIONS)
def test_a_recorded_session_replays_clean(
    stores: dict[str, SqliteStore], name: str, session: str
) -> None:
    store = stores[name]
    assert store.verify(session).ok
    result = replay(store, session, timeout=5)
    assert result.ok, result.divergence and result.divergence.message()
    assert result.events == result.total == len(store.read(session))


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_a_changed_program_diverges_where_expected(
    stores: dict[str, SqliteStore], name: str
) -> None:
    changed = MANIFESTS[name]["changed_program"]
    result = replay(
        stores[name],
        changed["session"],
        max_interrupt_chain_depth=changed["max_interrupt_chain_depth"],
        timeout=2,
    )
    assert result.divergence is not None
    assert result.divergence.seq == changed["diverges_at_seq"]
    assert result.divergence.expected.split()[0] == changed["expected"]
    assert result.divergence.got.split()[0] == changed["got"]
    assert result.events == changed["diverges_at_seq"] - 1
