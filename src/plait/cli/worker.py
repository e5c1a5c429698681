"""``plait worker``: a process that runs the sessions nobody else runs, until it is stopped.

It recovers what a stopped process left in flight, then, as commands are stored, as places
free and every fraction of a second, takes over the sessions that need an owner, as many as
it has free places: one whose owner stopped renewing its lease, or handed it back with work
waiting, or that has inbox commands and no live owner (docs/processes.md). ``--concurrency``
places bound the tasks it runs at once: a session with nothing running or queued holds none
(docs/processes.md#capacity). It hands back a session idle for ``--idle-sec``, and at once one
whose command finds no place free, so that work spreads over the workers. SIGTERM (or Ctrl-C)
drains it: what runs is given ``--drain-sec`` to end, then every session is handed back.
"""

from __future__ import annotations

import argparse
import signal
import threading

from plait.cli.common import config_of, err, make_runtime, model_settings, store_of

__all__ = ["cmd_worker"]


def cmd_worker(args: argparse.Namespace) -> int:
    """Run sessions that need an owner until SIGTERM, then hand them back."""
    config = config_of(args)
    stopping = threading.Event()
    with store_of(config, create=True) as store:
        commands = store.commands_waiter()  # a command for a session nobody owns wakes it
        for sig in (signal.SIGTERM, signal.SIGINT):  # seen within a second
            signal.signal(sig, lambda *_: stopping.set())
        runtime = make_runtime(
            config,
            model_settings(config),
            store,
            lease_sec=args.lease_sec,
            max_active_sessions=args.concurrency,
        )
        try:
            err(f"worker {runtime.owner.id}: lease {args.lease_sec:g} s, {config.store.url}")
            for recovery in runtime.recover():
                err(f"recovered session {recovery.session_id}")
            every = min(1.0, args.lease_sec / 4)  # for leases that lapse: nothing tells
            while not stopping.is_set():
                token = commands.token()
                for session_id in runtime.fill_places():
                    err(f"took over session {session_id}")
                runtime.hand_back_idle(args.idle_sec)
                commands.wait(token, every)
            err(f"draining (at most {args.drain_sec:g} s)")
            runtime.drain(args.drain_sec)
        finally:
            commands.close()
            runtime.close()
    err("worker stopped")
    return 0
