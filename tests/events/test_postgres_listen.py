"""``NotifyWaiter``, what a PostgreSQL subscription or owner waits on: a ``NOTIFY`` on its
channel, or a move of this process's own signal, ends a wait at once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support import POSTGRES_URL

from plait.events.stores.postgres_listen import NotifyWaiter
from plait.events.subscription import Signal

WAIT_SEC = 30.0


def connect() -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(POSTGRES_URL, autocommit=True)


@pytest.fixture
def channel() -> str:
    return f"plait_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def long_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait's steps outlast the test: what ends a wait is what it waits for."""
    monkeypatch.setattr(NotifyWaiter, "STEP_SEC", 3600.0)


@pytest.fixture
def moved() -> Signal:
    return Signal()


@pytest.fixture
def waiter(channel: str, moved: Signal, long_steps: None) -> Iterator[NotifyWaiter]:
    waiter = NotifyWaiter(connect, POSTGRES_URL, channel, moved)
    yield waiter
    waiter.close()


def waiting(waiter: NotifyWaiter, token: int) -> threading.Event:
    """Wait on ``waiter`` past ``token`` on a thread; the event is set once the wait ended."""
    ended = threading.Event()

    def wait() -> None:
        waiter.wait(token, 3600.0)
        ended.set()

    threading.Thread(target=wait, daemon=True).start()
    return ended


def test_a_move_of_this_processs_signal_ends_a_wait(waiter: NotifyWaiter, moved: Signal) -> None:
    ended = waiting(waiter, waiter.token())
    moved.notify()
    assert ended.wait(WAIT_SEC)


def test_a_notify_ends_a_wait(waiter: NotifyWaiter, channel: str) -> None:
    ended = waiting(waiter, waiter.token())
    with connect() as conn:
        conn.execute("SELECT pg_notify(%s, 'x')", (channel,))
    assert ended.wait(WAIT_SEC)


def test_closing_ends_a_wait(waiter: NotifyWaiter) -> None:
    ended = waiting(waiter, waiter.token())
    waiter.close()
    assert ended.wait(WAIT_SEC)
