"""``plait worker``: a process that runs the sessions nobody else runs, until it is stopped.

It recovers what a stopped process left in flight, then, as commands are stored, as room
frees and every fraction of a second, takes over the sessions that need an owner, as many as
it has room for: one whose owner stopped renewing its lease, or handed it back with work
waiting, or that has inbox commands and no live owner (docs/processes.md). ``--concurrency``
run slots bound the tasks it runs at once, over all its sessions; a session with nothing
running holds none, and keeps its actors (up to ``--max-active-sessions``, by default
``ACTIVE_PER_SLOT`` times as many) so that its next task starts at once
(docs/processes.md#capacity). It hands back a session idle for ``--idle-sec``, and one whose
command finds no room while other workers keep up, so that work spreads over the workers.
SIGTERM (or Ctrl-C) stops it: what runs is given ``--grace-sec`` to end, then cut,
and every session is handed back at once (docs/processes.md#stopping). A store that stays
away does not stop it: it waits for the store, then takes up the sessions it lost meanwhile
(docs/failures.md#the-store-blinks).
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import TYPE_CHECKING

from plait._errors import StoreUnavailableError
from plait.cli._common import config_of, err, make_runtime, model_settings, store_of
from plait.cli._stopping import Signals, stop_runtimes

if TYPE_CHECKING:
    from plait.events import Waiter
    from plait.runtime import Runtime

__all__ = ["ACTIVE_PER_SLOT", "cmd_worker"]

ACTIVE_PER_SLOT = 8
"""Sessions kept with actors per run slot, by default: an idle session's actors cost a few
threads' memory, where bringing it back from its log costs each of its tasks a swap on the
owner's thread (docs/processes.md#capacity)."""


def cmd_worker(args: argparse.Namespace) -> int:
    """Run sessions that need an owner until SIGTERM, then hand them back (``plait worker``)."""
    # Before anything else: a signal while it starts stops it before its first lease.
    signals = Signals(raising=False)  # the loop looks at ``first``; a second exits
    with signals:
        config = config_of(args)
        with store_of(config, create=True) as store:
            signals.check()  # before the runtime's imports (openai: a second or more)
            runtime = make_runtime(
                config,
                model_settings(config),
                store,
                lease_sec=args.lease_sec,
                max_running_tasks=args.concurrency,
                max_active_sessions=active_sessions(args),
            )
            # A command for a session it does not run, or room come free, wakes it; those of
            # the sessions it runs are its owner's thread's alone.
            others = functools.partial(_not_taken_by, runtime)
            signals.on_first = runtime.room.notify  # the loop's wait ends at the signal
            commands: Waiter | None = None
            try:
                commands = store.inbox.waiter(runtime.room, others)
                err(f"worker {runtime.owner.id}: lease {args.lease_sec:g} s, {config.store.url}")
                if signals.first is None:
                    for recovery in runtime.recover():
                        err(f"recovered session {recovery.session_id}")
                every = min(1.0, args.lease_sec / 4)  # for leases that lapse: nothing tells
                away = False  # the store stayed away past its outage_sec: wait for it
                while signals.first is None:
                    token = commands.token()
                    try:
                        for session_id in runtime.fill_places():
                            err(f"took over session {session_id}")
                        runtime.hand_back_idle(args.idle_sec)
                    except StoreUnavailableError as exc:  # docs/failures.md#the-store-blinks
                        if not away:
                            err(f"worker: {exc}; waiting for the store")
                        away = True
                        time.sleep(every)  # nothing to wait on: the store is what is missing
                        continue
                    if away:
                        err("worker: the store is back")
                        away = False
                    if signals.first is None:
                        commands.wait(token, every)
                stopped = signals.first
                stopped.line = "worker " + stop_runtimes([runtime], args.grace_sec, stopped)
            finally:
                if commands is not None:
                    commands.close()
                runtime.close()
        raise stopped


def _not_taken_by(runtime: Runtime, session_id: str) -> bool:
    """Whether ``runtime`` leaves the session's commands to the worker's loop to look at."""
    return not runtime.takes_commands(session_id)


def active_sessions(args: argparse.Namespace) -> int | None:
    """The most sessions the worker keeps with actors: ``--max-active-sessions``, or
    ``ACTIVE_PER_SLOT`` per run slot (no bound without ``--concurrency``)."""
    if args.max_active_sessions is not None:
        return int(args.max_active_sessions)
    return None if args.concurrency is None else ACTIVE_PER_SLOT * args.concurrency
