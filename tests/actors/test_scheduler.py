"""The scheduler is a fold of the log: FIFO, interrupts go first in order, one task at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from scripted import call, runtime_for
from strategies import START, new_events, session_items

from plait.events import (
    Closure,
    Event,
    MemoryStore,
    TaskCompleted,
    TaskDropped,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    TurnAborted,
)
from plait.events.projections import TASKS, TaskQueue, chain_to_drop, next_task, task_queue
from plait.testing import ScriptedModelServer, Step


def fold(items: list[tuple[Any, str | None, str | None]]) -> TaskQueue:
    return TASKS.fold(MemoryStore().append("s", new_events(items, START), 0))


def plan(task: str, conv: str = "root", depth: int = 0, closure: str | None = None) -> TaskPlan:
    return TaskPlan(
        task, conv, chain_depth=depth, closure=Closure(closure, "conv_send") if closure else None
    )


def enqueue(p: TaskPlan, front: bool = False) -> tuple[Any, str | None, str | None]:
    return (TaskEnqueued(p, front=front), p.conversation_id, p.task_id)


def test_tasks_wait_in_order_and_one_runs() -> None:
    state = fold([enqueue(plan("a")), enqueue(plan("b"))])
    assert next_task(state) == plan("a")
    state = fold([enqueue(plan("a")), enqueue(plan("b")), (TaskStarted(), "root", "a")])
    assert state.running == plan("a") and next_task(state) is None
    assert [p.task_id for p in state.pending] == ["b"]


def test_an_interrupt_runs_target_then_continuation_ahead_of_waiting_tasks() -> None:
    items = [
        enqueue(plan("a")),
        enqueue(plan("queued")),
        (TaskStarted(), "root", "a"),
        (TurnAborted("replaced", "replaced", awaiting_call_ids=["c1"]), "root", "a"),
        enqueue(plan("target", "helper", 1), front=True),
        enqueue(plan("cont", "root", 1, closure="c1"), front=True),
    ]
    state = fold(items)
    assert state.running is None
    assert [p.task_id for p in state.pending] == ["target", "cont", "queued"]
    nested = [
        *items,
        (TaskStarted(), "helper", "target"),
        (TurnAborted("replaced", "replaced", awaiting_call_ids=["c2"]), "helper", "target"),
        enqueue(plan("deeper", "third", 2), front=True),
        enqueue(plan("cont2", "helper", 2, closure="c2"), front=True),
    ]
    assert [p.task_id for p in fold(nested).pending] == ["deeper", "cont2", "cont", "queued"]


def test_completion_frees_the_timeline_and_drops_leave_the_queue() -> None:
    items = [
        enqueue(plan("a")),
        enqueue(plan("b", depth=1)),
        enqueue(plan("c")),
        (TaskStarted(), "root", "a"),
        (TaskCompleted("done"), "root", "a"),
    ]
    state = fold(items)
    assert state.running is None and next_task(state) == plan("b", depth=1)
    assert chain_to_drop(state) == [plan("b", depth=1)]
    state = fold([*items, (TaskDropped("interrupted by the user", "user"), "root", "b")])
    assert [p.task_id for p in state.pending] == ["c"]


@settings(max_examples=40, deadline=None)
@given(items=session_items())
def test_generated_sessions_never_run_two_tasks_at_once(
    items: list[tuple[Any, str | None, str | None]],
) -> None:
    state = TaskQueue()
    events: list[Event] = MemoryStore().append("s", new_events(items, START), 0)
    for event in events:
        if isinstance(event.body, TaskStarted):
            assert state.running is None, f"seq {event.seq} starts a task while one runs"
        TASKS.apply(state, event)


def test_the_scheduler_decides_from_the_journal_s_one_task_queue(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    """The queue that starts tasks is the one that ends a conversation's task and makes a
    session idle: the journal's fold, not a second one the Session keeps."""
    with runtime_for(server, tmp_path) as runtime:
        server.push(
            Step(tool_calls=[call("conv_create", user_instruction="remember 42")]),
            Step(text="noted"),
            Step(text="helper made"),
        )
        session = runtime.start_session()
        assert session.run("make a helper", timeout=30).ok
        root = session.root_conversation_id
        helper = next(c.id for c in session.conversations() if c.id != root)
        host = runtime.sessions.hosts[session.session_id]
        assert host.actor is not None
        scheduler = host.actor.proxy().scheduler.get(timeout=10)
        seen: list[bool] = []

        def compare(item: object) -> None:  # on the feed's thread, as the chain runs
            if isinstance(item, Event) and isinstance(item.body, TaskEnqueued):
                with scheduler.tasks() as read:
                    pass
                with host.journal.tasks() as kept:
                    seen.append(read is kept)

        server.push(
            Step(tool_calls=[call("conv_send", conversation_id=helper, text="what number?")]),
            Step(tool_calls=[call("conv_create", user_instruction="look it up")]),  # nested
            Step(text="it is 42"),
            Step(text="42"),
            Step(text="the helper says 42"),
        )
        outcome = session.run("ask the helper", timeout=30, on_item=compare)
        assert outcome.ok and outcome.last_assistant_message == "the helper says 42"
        assert seen and all(seen)  # one object: the journal folds it, the scheduler reads it
        log = runtime.store.read(session.session_id)
        with host.journal.tasks() as kept:
            assert kept == task_queue(log)  # and it is the log's fold, results and all
        assert host.journal.idle and not host.journal.waiting
        replaced = [e for e in log if isinstance(e.body, TurnAborted)]
        assert [e.body.reason for e in replaced] == ["replaced", "replaced", "replaced"]
