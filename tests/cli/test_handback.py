"""A stop that lands while ``plait exec`` hands its session back (docs/processes.md#stopping).

Once its own task has ended, ``plait exec --session S`` hands the session back, and first lets
what others sent to the session meanwhile run to its end: that wait is cut by a signal. The
stop must then finish the hand-back the signal cut: cut the running task at the grace period,
release the lease, and only then say ``handed back``. It said so and left the lease held: the
next process waited for it to lapse (issue 47, item 6: 28.5 s instead of about 4)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from plait.actors import ModelSettings
from plait.events import Event, Subscription, TaskEnqueued, TaskStarted, TurnAborted
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli
    from support import StoreFactory

SLOW = Step(text="Counting:\n" + "one " * 2000, chunk_chars=10, chunk_delay=0.1)
"""A reply that streams for 80 s: the task another process sent, running as the stop comes."""

WAIT_SEC = 30.0


def wait_for(tail: Subscription, found: Callable[[Event], bool], what: str) -> Event:
    """The next event of ``tail`` that ``found`` accepts (``what``, for the failure)."""
    while (event := tail.get(timeout=WAIT_SEC)) is not None:
        if found(event):
            return event
    raise AssertionError(f"no {what} within {WAIT_SEC:.0f} s")


def test_a_stop_while_exec_hands_back_releases_the_lease_before_saying_so(
    cli: Cli, server: ScriptedModelServer, durable_stores: StoreFactory
) -> None:
    store = durable_stores.open()
    on = ("--store", durable_stores.url)
    cli.configure(server.base_url)
    server.push(Step(text="Hello."))
    first = cli("exec", *on, "hello")
    assert first.returncode == 0, first.stderr
    session = first.stderr.split()[1]

    # Its own task streams for ever (until interrupted); the task another process sends it
    # meanwhile waits behind it, then streams for 80 s; then the next exec's.
    server.push(Step(text="and so on\n", endless=True, chunk_delay=0.05), SLOW, Step(text="On."))
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
    front = Runtime(
        durable_stores.url, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
    )
    with front, store.subscribe(store.last_position()) as tail:
        running = cli.spawn("exec", *on, "--grace-sec", "1", "--session", session, "mine")
        mine = wait_for(tail, lambda e: isinstance(e.body, TaskStarted), "TaskStarted")
        handle = front.follow(session)
        other = handle.submit("other")
        wait_for(tail, lambda e: e.task_id == other, "the other task's TaskEnqueued")
        assert running.out.next() == "and so on\n"  # its answer streams
        handle.interrupt()  # its own task ends: exec goes on to hand the session back
        wait_for(tail, lambda e: e.task_id == other and isinstance(e.body, TaskStarted), "start")
        # exec waits in the hand-back for the other task to end: stop it there.
        code, err = running.stop(signal.SIGTERM)
    assert code == 143, err
    line = err.splitlines()[-1]
    assert line.startswith("plait: stopped by SIGTERM: "), err
    assert line.endswith(f"session {session} handed back"), line
    lease = store.leases.get(session)
    assert lease is not None and not lease.live, f"'{line}', and the lease is held: {lease}"
    events = store.read(session)
    (cut,) = [e for e in events if e.task_id == other and isinstance(e.body, TurnAborted)]
    assert cut.body.cause == "shutdown", cut
    assert f"task {other} stopped at checkpoint" in line, line
    assert [e.task_id for e in events if isinstance(e.body, TaskEnqueued)].count(other) == 1
    assert mine.task_id != other

    again = cli.spawn("exec", *on, "--session", session, "And now?")
    assert again.err.next() == f"session {session} resumed (model scripted-model)\n"  # no wait
    assert again.out.next() == "On.\n"
    assert again.wait() == 0
    assert cli("verify", *on, session).returncode == 0
    replayed = cli("replay", *on, session, "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    result = json.loads(replayed.stdout)
    assert result["divergence"] is None and result["events"] == result["total"], result
