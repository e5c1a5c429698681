"""``NotifyWaiter``, what a PostgreSQL subscription or owner waits on: a ``NOTIFY`` on its
channel, or a move of this process's own signal, ends a wait at once; an owner's, only a
command of one of its own sessions."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support import POSTGRES_URL

from plait.events import Signal
from plait.events.stores._postgres_inbox import announced, announcement
from plait.events.stores._postgres_listen import NotifyWaiter

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


def notify(channel: str, *payloads: str) -> None:
    """Send a ``NOTIFY`` with each payload, one transaction each, in order."""
    with connect() as conn:
        for payload in payloads:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def test_a_waiter_for_some_sessions_is_not_woken_by_the_others_commands(
    channel: str, long_steps: None
) -> None:
    mine = announced(lambda session: session == "mine")
    with contextlib.closing(NotifyWaiter(connect, POSTGRES_URL, channel, wanted=mine)) as waiter:
        token = waiter.token()
        ended = waiting(waiter, token)
        notify(channel, announcement("another"), announcement("mine"))
        assert ended.wait(WAIT_SEC)
        assert waiter.token() == token + 1  # its own, the other passed over


@pytest.mark.parametrize("payload", ["", "12345"], ids=["none", "an older plait's id"])
def test_a_command_announced_without_its_session_wakes_every_owner(payload: str) -> None:
    mine = announced(lambda session: False)
    assert mine is not None and mine(payload)


def test_a_session_id_too_long_to_announce_is_announced_as_none() -> None:
    assert announcement("s" * 5000) == "" and announcement("s") == "s"
