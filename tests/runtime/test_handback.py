"""A lease release that a signal cuts is made again (docs/processes.md#stopping).

``plait exec`` and ``plait worker`` raise ``Stopped`` (a ``BaseException``) in their main thread
wherever it waits, and a stop's hand-back then releases the leases: a release the signal cut
must leave the lease held (and renewed) by its owner, and the store usable, so that the stop
releases it again. On PostgreSQL, psycopg cancels a statement cut only for
``KeyboardInterrupt``: the connection went on waiting for the cut statement's answer and
refused every later call (issue 47, item 6)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import psycopg
import pytest
from support import POSTGRES_URL, StoreFactory

from plait.actors import ModelSettings
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer

WAIT_SEC = 30.0


class Cut(BaseException):
    """What a signal raises in the main thread, as the commands' ``Stopped`` is."""


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory("postgres", tmp_path)
    yield factory
    factory.close()


def waiting_on_a_lock(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> bool:
    """Whether another backend's statement that holds ``statement`` waits for a row lock."""
    found = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND wait_event_type = 'Lock' AND query LIKE %s",
        (f"%{statement}%",),
    ).fetchone()
    return found is not None and int(str(found[0])) > 0


def test_a_release_a_signal_cuts_on_postgresql_is_made_again(
    postgres: StoreFactory, server: ScriptedModelServer
) -> None:
    store = postgres.open()
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
    runtime = Runtime(store, RuntimeSettings(model=settings, expire_every_sec=None))
    session = "handed-back"  # a lease alone: no session's actors write with it
    assert runtime.owner.take(session) is not None
    main = threading.main_thread().ident
    assert main is not None and threading.get_ident() == main, "signals reach the main thread"

    def cut(signum: int, frame: FrameType | None) -> None:
        raise Cut

    previous = signal.signal(signal.SIGUSR1, cut)
    cut_done = threading.Event()
    failures: list[str] = []
    with psycopg.connect(POSTGRES_URL) as locker, psycopg.connect(POSTGRES_URL) as look:
        look.autocommit = True
        # The lease's row locked: the release waits on it, in the main thread.
        locker.execute(
            f"SELECT 1 FROM {postgres.schema}.leases WHERE stream = %s FOR UPDATE", (session,)
        )

        def signal_once_it_waits() -> None:
            deadline = time.monotonic() + WAIT_SEC
            while not waiting_on_a_lock(look, "leases SET owner"):  # the release's
                if time.monotonic() > deadline:
                    failures.append("the release never waited for the lock")
                    break
                cut_done.wait(0.05)  # polls the server's view: there is no event to wait on
            signal.pthread_kill(main, signal.SIGUSR1)
            cut_done.wait(WAIT_SEC)
            locker.rollback()  # the lock goes: the cut statement, if it still runs, ends

        helper = threading.Thread(target=signal_once_it_waits, daemon=True)
        helper.start()
        try:
            with pytest.raises(Cut):
                runtime.owner.release(session)
        finally:
            cut_done.set()
            signal.signal(signal.SIGUSR1, previous)
        helper.join(WAIT_SEC)
    assert not failures, failures
    assert runtime.owner.holds(session)  # held, and renewed, until a release is answered
    runtime.owner.release(session)  # the stop's, again: on a connection that answers
    assert not runtime.owner.holds(session)
    lease = store.leases.get(session)
    assert lease is not None and not lease.live and lease.owner is None, lease
    runtime.close()
