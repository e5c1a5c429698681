"""The timer service: named jobs on one daemon thread, that one job's failure does not stop."""

from __future__ import annotations

import logging
import threading

import pytest

from plait import ConfigError
from plait.runtime._timers import Timers

WAIT_SEC = 10.0


class Counter:
    """A job that counts its runs and says when it has run ``enough`` times."""

    def __init__(self, enough: int = 3) -> None:
        self.runs = 0
        self.enough = enough
        self.done = threading.Event()
        self.threads: set[str] = set()

    def __call__(self) -> None:
        self.runs += 1
        self.threads.add(threading.current_thread().name)
        if self.runs >= self.enough:
            self.done.set()


def test_a_job_runs_again_and_again_on_the_timers_thread() -> None:
    timers = Timers("test-timers")
    job = Counter(enough=3)
    try:
        timers.every(0.01, job, "count")
        assert job.done.wait(WAIT_SEC)
        assert job.threads == {"test-timers"}
        assert timers.running
    finally:
        timers.close(WAIT_SEC)


def test_a_cancelled_job_runs_no_more() -> None:
    timers = Timers("test-timers")
    cancelled = Counter(enough=1)
    after_cancel: list[int] = []  # how often it had run, at each run of the other job
    enough = threading.Event()

    def cancel_it() -> None:
        # On the same thread as the cancelled job: no run of it can be under way here.
        timer.cancel()
        after_cancel.append(cancelled.runs)
        if len(after_cancel) == 3:
            enough.set()

    try:
        timer = timers.every(0.01, cancelled, "cancelled", first=0.0)
        assert cancelled.done.wait(WAIT_SEC)
        timers.every(0.01, cancel_it, "canceller", first=0.0)
        assert enough.wait(WAIT_SEC)
        assert len(set(after_cancel)) == 1 and timer.cancelled
    finally:
        timers.close(WAIT_SEC)


def test_a_failing_job_is_logged_and_stops_neither_itself_nor_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    timers = Timers("test-timers")
    failures = Counter(enough=2)
    others = Counter(enough=3)

    def fail() -> None:
        failures()
        raise RuntimeError("store gone away")

    try:
        with caplog.at_level(logging.ERROR, logger="plait"):
            timers.every(0.01, fail, "failing")
            timers.every(0.01, others, "healthy")
            assert failures.done.wait(WAIT_SEC)  # it ran again after it failed
            assert others.done.wait(WAIT_SEC)
    finally:
        timers.close(WAIT_SEC)
    logged = [r for r in caplog.records if "'failing' failed" in r.getMessage()]
    assert logged and logged[0].exc_info is not None


def test_a_job_may_ask_to_run_sooner_and_a_one_shot_runs_once() -> None:
    timers = Timers("test-timers")
    retried = Counter(enough=2)
    once = Counter(enough=1)

    def retry_soon() -> float:
        retried()
        return 0.01  # its interval is an hour: only this brings it back

    try:
        timers.every(3600.0, retry_soon, "retrying", first=0.0)
        shot = timers.call_later(0.0, once, "once")
        assert retried.done.wait(WAIT_SEC)
        assert once.done.wait(WAIT_SEC)
        assert shot.cancelled  # it has run; it will not again
    finally:
        timers.close(WAIT_SEC)
    assert once.runs == 1


def test_close_waits_for_the_job_under_way_and_ends_the_thread() -> None:
    timers = Timers("test-timers")
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(WAIT_SEC)
        finished.set()

    timer = timers.every(0.01, slow, "slow", first=0.0)
    assert started.wait(WAIT_SEC)
    closing = threading.Thread(target=timers.close, args=(WAIT_SEC,))
    closing.start()
    release.set()
    closing.join(WAIT_SEC)
    assert finished.is_set() and not closing.is_alive()
    assert not timers.running and timer.cancelled
    late = timers.every(0.01, Counter(), "too late")  # closed: nothing more runs
    assert late.cancelled and not timers.running


def test_no_thread_before_the_first_job_and_a_bad_interval_is_refused() -> None:
    timers = Timers("test-timers")
    assert not timers.running
    with pytest.raises(ConfigError, match="'nothing'"):
        timers.every(0, Counter(), "nothing")
    assert not timers.running
    timers.close()
