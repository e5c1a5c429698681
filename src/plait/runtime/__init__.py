# The runtime wing: the embedding API, which wires `plait.actors` on a `plait.events` store.
# It imports `plait.events`, `plait.actors` and `plait.telemetry`, never `plait.replay` or the cli.
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

from plait._faces import lazy

TYPE_CHECKING = False  # as typing has it, without importing typing

if TYPE_CHECKING:  # what type checkers read; a name is imported on its first use
    from plait.runtime._changes import KEEP, KeepType
    from plait.runtime._handle import SessionHandle
    from plait.runtime._liveness import owner_state
    from plait.runtime._outcome import Follower, Status, TaskOutcome, await_outcome
    from plait.runtime._outside import Outside
    from plait.runtime._recovery import Recovery, in_flight, records_resumes
    from plait.runtime._runtime import Runtime
    from plait.runtime._settings import RuntimeSettings
    from plait.runtime._supervision import Unrecorded

__all__ = [
    "KEEP",
    "Follower",
    "KeepType",
    "Outside",
    "Recovery",
    "Runtime",
    "RuntimeSettings",
    "SessionHandle",
    "Status",
    "TaskOutcome",
    "Unrecorded",
    "await_outcome",
    "in_flight",
    "owner_state",
    "records_resumes",
]

_PUBLIC: dict[str, tuple[str, ...]] = {
    "plait.runtime._changes": ("KEEP", "KeepType"),
    "plait.runtime._handle": ("SessionHandle",),
    "plait.runtime._liveness": ("owner_state",),
    "plait.runtime._outcome": ("Follower", "Status", "TaskOutcome", "await_outcome"),
    "plait.runtime._outside": ("Outside",),
    "plait.runtime._recovery": ("Recovery", "in_flight", "records_resumes"),
    "plait.runtime._runtime": ("Runtime",),
    "plait.runtime._settings": ("RuntimeSettings",),
    "plait.runtime._supervision": ("Unrecorded",),
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy(__name__, _PUBLIC)
