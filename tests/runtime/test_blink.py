"""The store blinks (docs/failures.md#the-store-blinks): three rounds of
``pg_terminate_backend``, a second apart, end every connection of the processes under test
while a task runs. Their connections come back; the task completes, a front end's submit made
meanwhile is accepted and runs, nothing is closed, the tool call ran once, the log verifies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from blinks import SCRIPT, Blinks, assert_ran_once, mcp_servers, run_through, worker_through
from support import StoreFactory, wait_for_event

from plait._errors import SessionFailedError
from plait.actors import ModelSettings
from plait.events import EventStore, ModelRequested, SessionClosed, TurnAborted
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step


@pytest.fixture
def blinks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Blinks, EventStore]]:
    """The rounds (their URL's extra parameters: the test's parameter, if any), and a store
    on the schema, read by the test's own connection."""
    stores = StoreFactory("postgres", tmp_path)
    store = stores.open()
    rounds = Blinks(stores.schema, getattr(request, "param", ""))
    try:
        yield rounds, store
    finally:
        rounds.close()
        stores.close()


def three_rounds(rounds: Blinks) -> Callable[[Callable[[], None]], None]:
    """End every connection three times, a second apart; run task two after the second."""

    def disturb(task_two: Callable[[], None]) -> None:
        for i in range(3):
            assert rounds.round() > 0
            if i == 1:
                task_two()
            rounds.gap(1.0)

    return disturb


def test_a_runtime_runs_on_while_the_store_blinks(
    blinks: tuple[Blinks, EventStore], tmp_path: Path
) -> None:
    rounds, store = blinks
    counter = tmp_path / "bumps"
    counter.touch()
    with ScriptedModelServer(SCRIPT) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        owner = Runtime(
            rounds.url,
            RuntimeSettings(
                model=settings,
                mcp_servers=mcp_servers(counter),
                owner_id="owner",
                expire_every_sec=None,
            ),
        )
        with owner, Runtime(rounds.url, RuntimeSettings(model=settings, owner_id="front")) as front:
            session = owner.start_session()
            followed = front.follow(session.session_id)
            outcomes = run_through(followed, store, three_rounds(rounds))
            assert not session.closed and not followed.closed
            lease = store.leases.get(session.session_id)
            assert lease is not None and (lease.owner, lease.epoch) == ("owner", 1)
            assert_ran_once(store, session.session_id, counter, *outcomes)
    assert all(rounds.ended)  # each round ended connections of the two runtimes


def test_a_worker_runs_on_while_the_store_blinks(
    blinks: tuple[Blinks, EventStore], tmp_path: Path
) -> None:
    rounds, store = blinks
    worker_through(rounds, store, tmp_path, three_rounds(rounds))


@pytest.mark.parametrize("blinks", ["&outage_sec=1"], indirect=True)
def test_a_session_whose_store_stays_away_is_lost_not_closed(
    blinks: tuple[Blinks, EventStore],
) -> None:
    rounds, store = blinks
    slow = Step(text="slow " * 30, chunk_chars=5, chunk_delay=0.1)  # about 3 s
    with ScriptedModelServer([slow, Step(text="two done")]) as server:
        settings = ModelSettings(base_url=server.base_url, api_key="k", model="m")
        with Runtime(
            rounds.url, RuntimeSettings(model=settings, owner_id="owner", expire_every_sec=None)
        ) as rt:
            session = rt.start_session()
            with ThreadPoolExecutor(1) as pool:
                one = pool.submit(session.run, "one", timeout=60)
                wait_for_event(store, session.session_id, ModelRequested)
                rounds.shut()  # away past outage_sec when the reply is to be written
                with pytest.raises(SessionFailedError, match="not back within 1 s"):
                    one.result(timeout=60)
            assert session.state == "lost"
            rounds.open()
            resumed = rt.resume(session.session_id)  # as another worker would, once it is back
            outcome = resumed.run("two", timeout=60)
            assert outcome.ok and outcome.last_assistant_message == "two done"
            events = store.read(session.session_id)
    assert not [e for e in events if isinstance(e.body, SessionClosed)]
    (aborted,) = [e.body for e in events if isinstance(e.body, TurnAborted)]
    assert aborted.reason == "crashed"  # what the lost session left running, ended on resume
    assert store.verify(session.session_id).ok
