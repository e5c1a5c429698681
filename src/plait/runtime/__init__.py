# The runtime wing: the embedding API. It wires `plait.actors` on a `plait.events` store;
# `plait.replay` and the command line build on it, and nothing here imports them.
"""Run sessions on a store, drive them, and pick up what a stopped process left running.

    settings = RuntimeSettings(model=ModelSettings(base_url=..., model=...))
    runtime = Runtime(".plait/plait.db", settings)
    session = runtime.start_session(base_instructions="Be brief.")
    outcome = session.run("What changed in the last release?")
    print(outcome.status, outcome.last_assistant_message)
    runtime.close()

``run`` waits for the task and every continuation an interrupting tool (``conv_create``,
``conv_send``) chains after it, and returns how the chain ended. ``subscribe`` gives the
session's events as they are recorded, with the transient text deltas between them.
"""

from plait.runtime.changes import KEEP, KeepType
from plait.runtime.handle import SessionHandle
from plait.runtime.outcome import Status, TaskOutcome
from plait.runtime.recovery import Recovery, in_flight
from plait.runtime.runtime import Runtime
from plait.runtime.settings import RuntimeSettings

__all__ = [
    "KEEP",
    "KeepType",
    "Recovery",
    "Runtime",
    "RuntimeSettings",
    "SessionHandle",
    "Status",
    "TaskOutcome",
    "in_flight",
]
