"""A live rerun: a recorded session's tasks, in order, sent to the model configured now, its
tool calls answered from the log, and a report of what changed (docs/replay.md#live-reruns).

Replay reproduces a session offline, event for event; a rerun asks what the session would have
done with another model, prompt or tool set. The rerun is a session of its own, a fork of the
original cut before its first task, so ``log``, ``audit``, ``history`` and ``replay`` work on
it; it runs live, with the MCP servers configured now listing the tools the model is offered,
and its calls answered from the original's log (``replay/_answers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import msgspec

from plait._errors import PlaitError, UnknownSessionError
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ConversationOpened,
    Event,
    EventStore,
    NewEvent,
    RerunOrigin,
    SessionStarted,
    TaskEnqueued,
)
from plait.events.stores import MemoryStore
from plait.replay._answers import LoggedApprovals, LoggedServers, RecordedCalls
from plait.replay._fork import fork
from plait.replay._inference import submitted
from plait.replay._rerun_report import Chain, RerunReport, chains, compare

if TYPE_CHECKING:
    from plait.actors import Approver, ModelSettings
    from plait.actors.mcp import FunctionTool, Report
    from plait.runtime import RuntimeSettings

__all__ = ["rerun", "rerun_each"]


def _cut(events: list[Event]) -> int:
    """The seq a rerun forks at: the last event before the first submitted task."""
    for event in events:
        if isinstance(event.body, TaskEnqueued) and submitted(event.body):
            return event.seq - 1
    return events[-1].seq


def rerun(
    store: EventStore,
    session_id: str,
    *,
    model: ModelSettings,
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
    tools: Iterable[FunctionTool | Callable[..., object]] = (),
    live_tools: bool = False,
    approver: Approver | None = None,
    save: bool = True,
    timeout: float = 300.0,
    user_instructions: str | None = None,
    settings: RuntimeSettings | None = None,
) -> RerunReport:
    """Run ``session_id``'s submitted tasks again, in order, against ``model``; return what
    changed, task by task.

    The tools offered are those of ``mcp_servers`` and ``tools`` (the configuration now). A
    call the original made (same tool, same arguments as canonical JSON) is answered from its
    log, with its recorded approval; another is answered "not recorded", or, with
    ``live_tools``, run for real (``approver`` deciding what the policy asks). With ``save``,
    the rerun is stored as a fork of the original (``RerunReport.rerun_session_id``);
    without, it runs in memory and nothing is kept. ``timeout`` bounds each task.
    ``user_instructions`` replace those the original's root conversation was opened with, if
    it was opened with some (as the command line opens its sessions) and they differ: a
    context change before the first task, which starts the history afresh
    (docs/replay.md#live-reruns). ``settings`` configure the runtime it runs on, but for
    its model, its MCP servers and tools, and its expiring, which are the arguments'.
    """
    # Here, not at the top: the runtime and asyncio (~50 ms to import), which `plait audit`,
    # `fork` and `verify` do without, importing this package.
    from plait.actors import ApprovalGate
    from plait.actors.mcp import McpServers, as_tools
    from plait.runtime import Outside, Runtime, RuntimeSettings

    original = store.read(session_id)
    if not original or not isinstance(original[0].body, SessionStarted):
        raise UnknownSessionError(session_id)
    recorded = chains(original)
    cut = max(_cut(original), 2)  # the root conversation is opened at seq 2
    target: EventStore = store if save else _copy(original, cut)
    against = RerunOrigin(model.model, model.base_url or "", live_tools)
    rerun_id = fork(target, session_id, cut, rerun=against)
    calls = RecordedCalls.of(original)
    functions = as_tools(tools)
    made: list[LoggedServers] = []

    def servers(configs: Mapping[str, McpServerConfig], report: Report) -> LoggedServers:
        inner = McpServers(configs, report, functions=functions)
        made.append(LoggedServers(inner, calls, live=live_tools))
        return made[-1]

    gate = ApprovalGate(approver) if live_tools else None
    outside = Outside(mcp_factory=servers, approval_gate=LoggedApprovals(calls, gate))
    done: list[tuple[Chain, str | None, str, str | None]] = []
    settings = msgspec.structs.replace(
        settings or RuntimeSettings(),
        model=model,
        mcp_servers=mcp_servers or {},
        tools=functions,
        expire_every_sec=None,
    )
    with Runtime(target, settings, _outside=outside) as runtime:
        session = runtime.resume(rerun_id)
        root = _root(original)
        told = root.user_instructions
        if user_instructions is not None and told is not None and told != user_instructions:
            session.change_context(user_instructions=user_instructions, clear_history=True)
        for chain in recorded:
            try:
                outcome = session.run(
                    chain.plan.input_items,
                    conversation_id=chain.plan.conversation_id,
                    timeout=timeout,
                )
            except PlaitError as exc:  # this task could not run; the next ones still do
                done.append((chain, None, "error", str(exc)))
                continue
            done.append((chain, outcome.task_id, outcome.status, None))
        session.close()
    rerun_events = target.read(rerun_id)
    from_log = set().union(*(s.from_log for s in made))
    not_recorded = set().union(*(s.not_recorded for s in made))
    by_task = {c.plan.task_id: c for c in chains(rerun_events)}
    tasks = [
        compare(
            n,
            chain,
            by_task.get(task_id) if task_id is not None else None,
            from_log=from_log,
            not_recorded=not_recorded,
            status=status,
            error=error,
        )
        for n, (chain, task_id, status, error) in enumerate(done, 1)
    ]
    return RerunReport(
        session_id, rerun_id if save else None, model.model, model.base_url or "", tasks
    )


def rerun_each(
    store: EventStore,
    session_ids: Iterable[str],
    *,
    concurrency: int = 4,
    on_done: Callable[[str], object] | None = None,
    **options: Any,
) -> dict[str, RerunReport | PlaitError]:
    """Rerun each session (``rerun``'s ``options``), ``concurrency`` at once, each on a
    runtime of its own (its calls are answered from its own log); return each one's report, or
    the error that stopped it: a session that fails does not stop the others. ``on_done`` is
    told each session as it ends."""
    results: dict[str, RerunReport | PlaitError] = {}

    def one(session_id: str) -> None:
        try:
            results[session_id] = rerun(store, session_id, **options)
        except PlaitError as exc:
            results[session_id] = exc
        if on_done is not None:
            on_done(session_id)

    ids = list(session_ids)
    with ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="plait-rerun") as pool:
        list(pool.map(one, ids))
    return {session_id: results[session_id] for session_id in ids}


def _root(events: list[Event]) -> ConversationOpened:
    """How the session's root conversation was opened."""
    started = events[0].body
    assert isinstance(started, SessionStarted)
    for event in events:
        body = event.body
        if (
            isinstance(body, ConversationOpened)
            and event.conversation_id == started.root_conversation_id
        ):
            return body
    raise PlaitError(f"session {events[0].stream}: its root conversation was never opened")


def _copy(events: list[Event], upto: int) -> MemoryStore:
    """A memory store holding ``events`` up to ``upto``: a rerun that keeps nothing forks
    there."""
    memory = MemoryStore()
    kept = [NewEvent(e.body, e.conversation_id, e.task_id, at=e.at) for e in events[:upto]]
    memory.append(events[0].stream, kept, 0)
    return memory
