"""``plait exec --session S`` while another process runs S
(docs/processes.md#following-from-the-command-line): a real ``plait worker`` owns S, the
follower is another real ``plait`` process. It submits its task through the owner's inbox at
once, whatever MCP servers its configuration names (the owner runs them), prints its own
task's answer as the owner records it, and exits with its task's outcome, on both stores."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import StoreFactory

from plait.actors import ModelSettings
from plait.cli._output import ExecPrinter
from plait.events import (
    AgentMessageDelta,
    Body,
    Closure,
    Event,
    ModelRequested,
    ModelResponded,
    Subscription,
    TaskCompleted,
    TaskEnqueued,
    TaskPlan,
    TaskStarted,
    Transient,
    TurnAborted,
)
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli, Running

TEST_SERVER = Path(__file__).parent.parent / "mcp" / "server.py"

MCP = f'[mcp_servers.t]\ncommand = "{sys.executable}"\nargs = ["{TEST_SERVER}", "stdio"]\n'
"""An MCP server in the project's configuration: the worker runs it, the follower must not
wait for it."""

EXITS_WITHIN_SEC = 30.0
"""What a follower's exec is given to exit: less than the 40 s it waited for servers it does
not run before the fix (a bound on a hang, not a measure of speed)."""


@pytest.fixture
def front(durable_stores: StoreFactory, server: ScriptedModelServer) -> Iterator[Runtime]:
    """A front end's runtime on the test's store: it starts sessions and submits to them, and
    leaves the running to the worker."""
    settings = ModelSettings(base_url=server.base_url, api_key="k", model="scripted-model")
    store = durable_stores.open()
    with Runtime(
        store, RuntimeSettings(model=settings, owner_id="front", expire_every_sec=None)
    ) as runtime:
        yield runtime


def owned_by_a_worker(cli: Cli, front: Runtime, first: str) -> tuple[str, Running]:
    """Start a session, hand it to a new ``plait worker`` by submitting task ``first`` from
    the front end; return the session and the worker, which owns it once ``first`` ran."""
    started = front.start_session()
    session = started.session_id
    assert started.release(10)  # nobody owns it: the worker takes it when work comes
    worker = cli.spawn("worker")
    assert worker.err.next().startswith("worker ")
    outcome = front.follow(session).run(first, timeout=60)
    assert outcome.ok, outcome
    lease = front.store.leases.get(session)
    assert lease is not None and lease.live and lease.owner != "front"
    return session, worker


def next_of(tail: Subscription, session: str, kind: type, after: int = 0) -> Event:
    """The next event of ``kind`` in ``session`` past seq ``after`` that the subscription
    ``tail`` gets."""
    while (event := tail.get(timeout=30)) is not None:
        if event.stream == session and isinstance(event.body, kind) and event.seq > after:
            return event
    raise AssertionError(f"no {kind.__name__} in session {session} within 30 s")


def exited(running: Running) -> tuple[int, str, list[str]]:
    """Wait for ``running`` to exit by itself: its code, stdout and stderr lines; kill it and
    fail if it has not within ``EXITS_WITHIN_SEC``."""
    try:
        code = running.process.wait(EXITS_WITHIN_SEC)
    except subprocess.TimeoutExpired:
        running.process.kill()
        said = "".join(running.err.rest())
        raise AssertionError(f"exec still ran after {EXITS_WITHIN_SEC:g} s:\n{said}") from None
    return code, "".join(running.out.rest()), running.err.rest()


def stopped(worker: Running) -> None:
    """Stop the worker as an operator does."""
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 143


def test_a_follower_exec_submits_at_once_whatever_servers_its_config_names(
    cli: Cli, durable_stores: StoreFactory, server: ScriptedModelServer, front: Runtime
) -> None:
    cli.configure(server.base_url, f'[store]\nurl = "{durable_stores.url}"\n{MCP}')
    server.push(Step(text="First."), Step(text="Hello there."), Step(status=500))
    session, worker = owned_by_a_worker(cli, front, "first")
    try:
        code, answer, said = exited(cli.spawn("exec", "--session", session, "hello"))
        assert (code, answer) == (0, "Hello there.\n"), said
        assert said[0].startswith(f"session {session} followed (run by "), said
        *_, done = [e for e in front.store.read(session) if isinstance(e.body, TaskCompleted)]
        assert done.body.last_assistant_message == "Hello there."

        # The task fails there: the follower exits as the owner's exec would, with one line.
        code, answer, said = exited(cli.spawn("exec", "--session", session, "fail"))
        assert (code, answer) == (1, ""), said
        assert said[-1].startswith("plait: ") and "scripted error" in said[-1], said
    finally:
        stopped(worker)
    (ended,) = [e.body for e in front.store.read(session) if isinstance(e.body, TurnAborted)]
    assert ended.model_error is not None


def test_a_follower_exec_prints_its_own_tasks_answer_and_no_other(
    cli: Cli, durable_stores: StoreFactory, server: ScriptedModelServer, front: Runtime
) -> None:
    cli.configure(server.base_url, f'[store]\nurl = "{durable_stores.url}"\n')
    other = Step(text="Not yours. ", endless=True)  # runs until it is interrupted
    server.push(Step(text="First."), other, Step(text="Second,\nin two lines."))
    session, worker = owned_by_a_worker(cli, front, "first")
    followed = front.follow(session)
    try:
        with front.store.subscribe() as tail:
            past = front.store.last_seq(session)  # before the submit: its start comes after
            running = followed.submit("the other task")
            began = next_of(tail, session, TaskStarted, past)  # it streams, and never ends
            assert began.task_id == running
            second = cli.spawn("exec", "--session", session, "second task")
            mine = next_of(tail, session, TaskEnqueued, began.seq)
            followed.interrupt()  # the other task ends; the follower's runs
            code, answer, said = exited(second)
    finally:
        stopped(worker)
    assert code == 0, said
    assert said[0].startswith(f"session {session} followed (run by "), said
    assert answer == "Second,\nin two lines.\n", said
    events = front.store.read(session)
    (done,) = [e for e in events if e.task_id == mine.task_id and isinstance(e.body, TaskCompleted)]
    assert done.body.last_assistant_message == "Second,\nin two lines."


# What the printer shows of a feed, item by item: the owner's (text deltas, then the recorded
# reply), a follower's (the recorded reply alone), and other tasks' (nothing).


def event(seq: int, task: str | None, body: Body, conversation: str = "root") -> Event:
    return Event("s", seq, datetime(2026, 1, 1, tzinfo=UTC), 1, body, b"", conversation, task)


def shown(*items: Event | Transient) -> tuple[str, str]:
    """What ``plait exec`` prints of ``items`` once it submitted task ``mine`` to the root
    conversation: its stdout and its stderr."""
    out, err = io.StringIO(), io.StringIO()
    printer = ExecPrinter("root", out, err, json=False)
    printer.follow("mine")
    for item in items:
        printer(item)
    printer.end_line()
    return out.getvalue(), err.getvalue()


def delta(text: str, task: str = "mine") -> AgentMessageDelta:
    return AgentMessageDelta("root", task, text)


@pytest.mark.parametrize(
    "deltas",
    [[], ["Hel", "lo."], ["Hel"]],
    ids=["follower", "owner", "owner-whose-feed-fell-behind"],
)
def test_each_reply_is_printed_once_whatever_of_it_streamed(deltas: list[str]) -> None:
    replies = [event(2, "mine", ModelResponded("Hello.")), event(3, "mine", TaskCompleted())]
    out, _ = shown(event(1, "mine", TaskStarted()), *map(delta, deltas), *replies)
    assert out == "Hello.\n"


def test_other_tasks_and_summaries_are_not_the_answer() -> None:
    out, err = shown(
        delta("Not yours.", "other"),
        event(1, "other", ModelResponded("Not yours.")),
        event(2, "mine", ModelRequested("m", "t", "i", purpose="compact")),
        event(3, "mine", ModelResponded("A summary.")),
        event(4, "mine", ModelRequested("m", "t", "i")),
        event(5, "mine", ModelResponded("Mine.")),
    )
    assert (out, err) == ("Mine.\n", "[compacting the history...]\n")


def test_the_tasks_a_conv_create_leads_to_are_shown() -> None:
    target = TaskPlan("target", "helper")
    closure = Closure("call_1", "conv_create", target_task_id="target")
    out, err = shown(
        event(1, "mine", ModelResponded("Asking.")),
        event(2, "mine", TurnAborted("replaced", "replaced", awaiting_call_ids=["call_1"])),
        event(3, "target", TaskEnqueued(target, front=True), "helper"),
        event(4, "goes-on", TaskEnqueued(TaskPlan("goes-on", "root", closure=closure), True)),
        event(5, "target", ModelResponded("Two."), "helper"),
        event(6, "goes-on", ModelResponded("It says two.")),
        event(7, "other", ModelResponded("Not yours.")),
    )
    assert out == "Asking.\nIt says two.\n"
    assert err == "  [helper] Two.\n"
