"""``plait sessions`` as a user reads it: the session active last first, each with its title
and its state in words (idle, running, waiting, crashed, closed, owned by another process),
``--limit``; a header line on a terminal only; and ``plait replay`` of a live session saying so.

The sessions are made by runtimes of the test's that stand for other processes (owner ids
``web1``, ``web2``...), each left in one state, against one ``ScriptedModelServer``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scripted import Stuck, call, crash, local_mcp_servers
from support import wait_for_event
from terminal import Terminal

from plait.actors import ModelSettings
from plait.events import ModelRequested, SqliteStore, ToolApprovalRequested
from plait.runtime import Runtime, RuntimeSettings
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli

ENDLESS = Step(text="and so on ", endless=True)
"""A reply that streams until the client hangs up: its task runs as long as the test wants."""


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


class Store:
    """A store whose sessions are each in one state, made in this order (so listed in the
    reverse one): ``closed``, ``idle``, ``owned``, ``handed_back``, ``running``, ``crashed``,
    ``killed_idle``, ``approval``."""

    def __init__(self, cli: Cli, server: ScriptedModelServer, stack: ExitStack) -> None:
        self.cli, self.server, self.stack = cli, server, stack
        self.ids: dict[str, str] = {}
        self.reader = stack.enter_context(SqliteStore(cli.store))
        self.running_task = ""

    def runtime(self, owner: str, **more: Any) -> Runtime:
        settings = ModelSettings(base_url=self.server.base_url, api_key="k", model="m")
        runtime = Runtime(
            str(self.cli.store),
            RuntimeSettings(model=settings, owner_id=owner, expire_every_sec=None, **more),
        )
        self.stack.callback(runtime.close)
        return runtime

    def started(self, runtime: Runtime, name: str, prompt: str) -> Any:
        """A session of ``runtime`` whose first task (``prompt``) is streaming a reply."""
        self.server.push(ENDLESS)
        session = runtime.start_session()
        self.ids[name] = session.session_id
        task = session.submit(prompt)
        wait_for_event(self.reader, session.session_id, ModelRequested)
        return session, task


@pytest.fixture(scope="module")
def states(recorded: Cli) -> Iterator[Store]:
    cli = recorded  # its store holds rec-1, closed; its first prompt is "How many?"
    with ScriptedModelServer([]) as server, ExitStack() as stack:
        cli.configure(server.base_url)
        store = Store(cli, server, stack)
        store.ids["closed"] = "rec-1"
        idle = store.runtime("web0").start_session()
        server.push(Step(text="Hi."))
        idle.run("Hello   there,\n\n  plait:  a   title   on one line", timeout=30)
        idle.release()  # handed back, nothing waiting: its lease is free
        store.ids["idle"] = idle.session_id
        owned = store.runtime("web1").start_session()
        server.push(Step(text="Yes."))
        owned.run("Is this one held?", timeout=30)  # web1 keeps it, idle
        store.ids["owned"] = owned.session_id
        # Stopped on purpose with a task waiting: the lease is left lapsed, for a worker.
        back, _ = store.started(store.runtime("web3"), "handed_back", "Cut me short")
        back.submit("Run me later")
        back.release(grace_sec=0)
        running, store.running_task = store.started(store.runtime("web2"), "running", "Spin")
        doomed = store.runtime("web4")
        crashed, _ = store.started(doomed, "crashed", "Crash here")
        crash(doomed, crashed)
        quiet = store.runtime("web5")
        killed = quiet.start_session()  # killed while nothing ran: nothing waits
        server.push(Step(text="Done."))
        killed.run("Nothing runs now", timeout=30)
        store.ids["killed_idle"] = killed.session_id
        crash(quiet, killed)
        asking = store.runtime(
            "web6", mcp_servers=local_mcp_servers(), approval_policy="on-write", approver=Stuck()
        ).start_session()
        store.ids["approval"] = asking.session_id
        server.push(Step(tool_calls=[call("t__note", key="k", text="v")]))
        server.push(Step(text="Not written."))
        asking.submit("Write a note")
        wait_for_event(store.reader, asking.session_id, ToolApprovalRequested)
        yield store
        running.interrupt()
        asking.interrupt()


ORDER = ["approval", "killed_idle", "crashed", "running", "handed_back", "owned", "idle", "closed"]
"""The sessions, the one active last first."""


def test_sessions_lists_the_one_active_last_first_with_its_title_and_state(
    states: Store,
) -> None:
    listed = states.cli("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json_lines(listed.stdout)
    assert [row["session_id"] for row in rows] == [states.ids[name] for name in ORDER]
    got = {name: row for name, row in zip(ORDER, rows, strict=True)}
    assert {name: (row["state"], row["waiting_for"]) for name, row in got.items()} == {
        "approval": ("waiting", "approval"),
        "killed_idle": ("idle", None),
        "crashed": ("crashed", None),
        "running": ("running", None),
        "handed_back": ("waiting", "owner"),
        "owned": ("owned", None),
        "idle": ("idle", None),
        "closed": ("closed", None),
    }
    assert got["running"]["task_id"] == states.running_task
    assert got["owned"]["owner"] == "web1" and got["owned"]["lease"] == "live"
    assert got["idle"]["title"] == "Hello there, plait: a title on one line"
    assert got["closed"]["title"] == "How many?"
    times = [row["last_active_at"] for row in rows]
    assert times == sorted(times, reverse=True)

    text = states.cli("sessions")  # a pipe: rows only, the same order, states in words
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [states.ids[n][:8] for n in ORDER]
    words = [" ".join(line.split()[4:8]) for line in lines]
    assert words[0] == "waiting for approval Write"
    assert words[2].startswith("crashed Crash here")
    assert words[3].startswith("running Spin")
    assert words[4].startswith("waiting for an owner")
    assert words[5].startswith("owned by web1 Is")
    assert lines[6].endswith("idle                  Hello there, plait: a title on one line")


def test_limit_shows_the_sessions_active_last_and_says_how_many_more(states: Store) -> None:
    limited = states.cli("sessions", "--limit", "2")
    assert [line.split()[0] for line in limited.stdout.splitlines()] == [
        states.ids[name][:8] for name in ORDER[:2]
    ]
    assert limited.stderr == (
        "6 more sessions, active before these: plait sessions --limit 0 lists all\n"
    )
    one_more = states.cli("sessions", "--limit", str(len(ORDER) - 1))
    assert one_more.stderr.startswith("1 more session, active before these")
    everything = states.cli("sessions", "--limit", "0")
    assert len(everything.stdout.splitlines()) == len(ORDER) and everything.stderr == ""
    assert len(json_lines(states.cli("sessions", "--json", "--limit", "3").stdout)) == 3
    for bad in ("-1", "abc"):
        refused = states.cli("sessions", "--limit", bad)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.splitlines()[-1].endswith(f"expected a number, 0 or more, got {bad}")


def on_terminal(cli: Cli, *args: str, columns: int = 72) -> str:
    """What a person sees of ``plait ARGS`` on a terminal ``columns`` wide (colour off)."""
    env = {**cli.env, "COLUMNS": str(columns), "TERM": "xterm", "NO_COLOR": "1"}
    term = Terminal([sys.executable, "-m", "plait", *args], cli.cwd, env)
    assert term.exit_code() == 0, term.seen
    return term.seen.replace("\r\n", "\n")


def test_on_a_terminal_sessions_has_a_header_and_titles_cut_to_fit(states: Store) -> None:
    seen = on_terminal(states.cli, "sessions", columns=88).splitlines()
    assert seen[0].split() == ["SESSION", "LAST", "ACTIVE", "(UTC)", "EVENTS", "STATE", "TITLE"]
    assert len(seen) == 1 + len(ORDER)
    idle = next(line for line in seen if line.startswith(states.ids["idle"][:8]))
    assert len(idle) == 88 and idle.endswith(" Hello there, plait: a titl…")
    # The columns line up under their names.
    assert seen[0].index("STATE") == idle.index("idle")
    assert seen[0].index("TITLE") == idle.index("Hello")


def test_on_a_terminal_log_audit_and_stats_name_their_columns(recorded: Cli) -> None:
    log = on_terminal(recorded, "log", "rec", columns=200).splitlines()
    assert log[0].split() == ["SEQ", "AT", "EVENT", "CONV", "TASK", "BODY"]
    assert log[1].split()[:3] == ["1", log[1].split()[1], "SessionStarted"]
    audit = on_terminal(recorded, "audit", "rec", columns=200).splitlines()
    assert audit[0].split() == [
        "SEQ", "TOOL", "OUTCOME", "APPROVAL", "DURATION", "OUTPUT", "SERVER", "CONVERSATION"
    ]  # fmt: skip
    row = audit[1]
    assert row.split()[2] == "conv_create"
    # the approval and server columns of a built-in tool: "-", each under its name
    assert row[audit[0].index("APPROVAL")] == "-" and row[audit[0].index("SERVER")] == "-"
    stats = on_terminal(recorded, "stats", "rec", columns=200).splitlines()
    assert stats[0].startswith("CONV      TASKS  TURNS  TOKENS IN  TOKENS OUT  CONTEXT  ")
    first = stats[1]
    assert first[stats[0].index("TASKS") : stats[0].index("TASKS") + 5].strip() == "3"
    # A pipe gets the rows only, and --json never a header.
    for command in (["log", "rec"], ["audit", "rec"], ["stats", "rec"]):
        assert recorded(*command).stdout.splitlines()[0] not in {log[0], audit[0], stats[0]}
    assert on_terminal(recorded, "stats", "rec", "--json").startswith('{"conversation_id"')


def test_replay_of_a_live_session_says_it_is_live_and_how_much_it_replayed(
    states: Store,
) -> None:
    running = states.ids["running"]
    total = states.reader.last_seq(running)
    result = states.cli("replay", running[:8])
    assert result.returncode == 0, result.stdout + result.stderr  # what was there replays
    assert result.stdout == (
        f"session {running[:8]} is live (owned by web2, running task "
        f"{states.running_task[:8]}): replayed its first {total} events, no difference; "
        "more are being written\n"
    )
    report = json.loads(states.cli("replay", running[:8], "--json").stdout)
    assert report["divergence"] is None and report["events"] == report["total"] == total
    assert report["live"] == {"owner": "web2", "task_id": states.running_task}
    owned = states.ids["owned"]
    quiet = states.cli("replay", owned[:8])
    assert quiet.returncode == 0
    assert quiet.stdout.startswith(f"session {owned[:8]} is live (owned by web1, idle): ")
    # A session nobody owns replays as before.
    crashed = states.cli("replay", states.ids["crashed"][:8], "--json")
    assert json.loads(crashed.stdout)["live"] is None
    assert states.cli("replay", "rec").stdout == "replayed 34 of 34 events: no difference\n"


def test_a_first_prompt_late_in_the_log_and_a_long_task_running_are_found(
    tmp_path: Path,
) -> None:
    """Past the events read at first: a title after 40 server failures; a running task of 300
    events, whose start is past the tail read first (``HEAD``, ``TAIL`` in cli/_listing.py)."""
    from plait.cli._listing import HEAD, TAIL, listing
    from plait.events import (
        ConversationOpened,
        InputText,
        McpServerFailed,
        NewEvent,
        SessionStarted,
        TaskEnqueued,
        TaskPlan,
        TaskStarted,
        TurnStarted,
    )

    def opened(root: str) -> list[Any]:
        started = SessionStarted(root_conversation_id=root)
        return [NewEvent(started), NewEvent(ConversationOpened(), root)]

    def task(root: str, task_id: str, prompt: str, turns: int) -> list[Any]:
        plan = TaskPlan(task_id, root, [InputText(prompt)])
        bodies = [TaskEnqueued(plan), TaskStarted(), *(TurnStarted(turn=n) for n in range(turns))]
        return [NewEvent(body, root, task_id) for body in bodies]

    failed = [NewEvent(McpServerFailed("s", "not found", attempt=n)) for n in range(1, 41)]
    with SqliteStore(tmp_path / "plait.db") as store:
        store.append("late", [*opened("r1"), *failed, *task("r1", "t1", "Late  title", 1)], 0)
        store.append("long", [*opened("r2"), *task("r2", "t2", "Long run", 300)], 0)
        store.leases.acquire("long", "web9", 60.0)
        rows, more = listing(store)
    assert HEAD < 44 and TAIL < 300 and more == 0
    assert [(r["session_id"], r["title"], r["state"], r["task_id"]) for r in rows] == [
        ("long", "Long run", "running", "t2"),
        ("late", "Late title", "crashed", "t1"),  # never owned, a task cut: not taken up
    ]


def test_a_fork_not_yet_resumed_is_listed_as_such_not_as_its_source_was(cli: Cli) -> None:
    source = cli.record("src")  # its helper's task runs at seq 12: a fork there has it running
    forked = cli("fork", source, "--at", "12")
    assert forked.returncode == 0, forked.stderr
    fork = forked.stdout.strip()
    (row,) = [r for r in json_lines(cli("sessions", "--json").stdout) if r["session_id"] == fork]
    assert (row["state"], row["forked_from"]) == ("forked", {"session_id": source, "at_seq": 12})
    (line,) = [line for line in cli("sessions").stdout.splitlines() if line.startswith(fork[:8])]
    assert line.split()[3:8] == ["12", "forked,", "not", "resumed", "fork"]  # events, state, title
