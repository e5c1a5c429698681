"""MCP tools in the turn loop: a real test server, a scripted model over HTTP.

Tests that need a server of their own (it crashes, grows its tool list, or must be gone
when the runtime closes) start one over stdio; the others share one over streamable HTTP
(``mcp_url``), as none of them depends on the transport or on what another left behind."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from scripted import assert_histories_valid, call, runtime_for

from plait.actors import McpLimits
from plait.actors.mcp import McpServerConfig
from plait.events import (
    ConversationOpened,
    Event,
    McpAllowlistNormalized,
    McpServerFailed,
    McpServerReady,
    McpToolsRefreshed,
    ModelRequested,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallStarted,
    TurnAborted,
)
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, Step

SERVER = Path(__file__).parents[1] / "mcp" / "server.py"


def mcp_server(*args: str, **config: Any) -> McpServerConfig:
    return McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio", *args], **config)


def at(url: str, **config: Any) -> McpServerConfig:
    return McpServerConfig(url=url, **config)


def mcp_runtime(server: ScriptedModelServer, tmp_path: Path, **servers: McpServerConfig) -> Runtime:
    ids = itertools.count(1)  # the session is id-1, its root conversation id-2
    servers = servers or {"t": mcp_server()}
    return runtime_for(server, tmp_path, mcp_servers=servers, new_id=lambda: f"id-{next(ids)}")


def bodies(events: list[Event], kind: type[Any]) -> list[Any]:
    return [e.body for e in events if isinstance(e.body, kind)]


def tool_names(request: Any) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools", [])]


def test_a_call_goes_to_the_server_and_its_output_back_to_the_model(
    tmp_path: Path, mcp_url: str
) -> None:
    script = [Step(tool_calls=[call("t__echo", text="hello")]), Step(text="it said hello")]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        outcome = session.run("echo hello", timeout=60)
        events = runtime.store.read(session.session_id)
    assert outcome.last_assistant_message == "it said hello"
    # The first turn waited for the server: the model saw built-ins, then MCP tools by name.
    names = tool_names(server.requests[0])
    assert names[:5] == ["conv_create", "conv_send", "conv_list", "conv_history", "conv_destroy"]
    assert names[5:] == sorted(names[5:]) and "t__echo" in names and "t__crash" in names
    [requested] = bodies(events, ToolCallRequested)
    assert (requested.tool, requested.read_only) == ("t__echo", True)
    [completed] = bodies(events, ToolCallCompleted)
    assert (completed.output, completed.outcome) == ("hello", "ok")
    assert server.requests[1].messages[-1] == {
        "role": "tool",
        "content": "hello",
        "tool_call_id": requested.call_id,
    }
    [ready] = bodies(events, McpServerReady)
    assert ready.server == "t" and len(ready.tools) >= 10  # listed across pages
    assert_histories_valid(events)


def test_the_tool_list_and_its_hash_are_the_same_in_every_session(
    tmp_path: Path, mcp_url: str
) -> None:
    hashes, lists = [], []
    for run in range(2):
        with (
            ScriptedModelServer([Step(text="ok")]) as server,
            mcp_runtime(server, tmp_path / str(run), t=at(mcp_url)) as runtime,
        ):
            session = runtime.start_session()
            assert session.run("hi", timeout=60).ok
            events = runtime.store.read(session.session_id)
            [requested] = bodies(events, ModelRequested)
            hashes.append(requested.tools_sha256)
            lists.append(json.dumps(server.requests[0].body["tools"], sort_keys=True))
    assert hashes[0] == hashes[1] and lists[0] == lists[1]
    # The snapshot: the built-ins in their fixed order, then the server's tools by name.
    names = [tool["function"]["name"] for tool in json.loads(lists[0])]
    assert names == [
        "conv_create",
        "conv_send",
        "conv_list",
        "conv_history",
        "conv_destroy",
        *(
            f"t__{name}"
            for name in ["add", "crash", "echo", "fail", "grow", "header", "huge", "image"]
        ),
        *(f"t__{name}" for name in ["lookup", "note", "pick", "rendezvous", "served", "slow"]),
    ]


def test_tools_outside_the_view_are_refused_and_recorded(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(tool_calls=[call("t__note", key="k", text="x"), call("t__invented")]),
        Step(text="done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session(mcp_allowlist=["t__echo"])
        assert session.run("try", timeout=60).ok
        events = runtime.store.read(session.session_id)
    assert tool_names(server.requests[0])[5:] == ["t__echo"]
    outcomes = [(c.outcome, c.output) for c in bodies(events, ToolCallCompleted)]
    assert [o for o, _ in outcomes] == ["refused", "refused"]
    assert "t__note" in outcomes[0][1] and "not offered" in outcomes[0][1]
    assert_histories_valid(events)


def test_errors_and_bad_arguments_go_back_to_the_model(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(tool_calls=[call("t__fail", message="disk full")]),
        Step(tool_calls=[call("t__add", a="one", b=2)]),
        Step(text="gave up"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("go", timeout=60).ok
        events = runtime.store.read(session.session_id)
    failed, invalid = bodies(events, ToolCallCompleted)
    assert failed.outcome == "error" and "disk full" in failed.output
    assert invalid.outcome == "error" and "arguments" in invalid.output and "a" in invalid.output
    assert_histories_valid(events)


def test_an_interrupt_during_a_tool_call_aborts_the_task(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(tool_calls=[call("t__slow", seconds=30)]),
        Step(tool_calls=[call("t__echo", text="still here")]),
        Step(text="fine"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            session.submit("be slow")
            for item in feed:
                if isinstance(item, Event) and isinstance(item.body, ToolCallStarted):
                    session.interrupt()  # the call is with the server now
                if isinstance(item, Event) and isinstance(item.body, TurnAborted):
                    break
        after = session.run("and now?", timeout=60)  # the server still answers
        events = runtime.store.read(session.session_id)
    assert after.last_assistant_message == "fine"
    aborted = [e for e in events if isinstance(e.body, TurnAborted)]
    before = [type(e.body).__name__ for e in events if e.seq < aborted[0].seq][-2:]
    assert before == ["ToolCallRequested", "ToolCallStarted"]
    assert aborted[0].body.reason == "interrupted"
    assert bodies(events, ToolCallCompleted)[0].output == "still here"
    assert_histories_valid(events)  # the open call got its synthetic output


def test_closing_the_runtime_leaves_no_server_running(tmp_path: Path) -> None:
    with ScriptedModelServer([Step(text="ok")]) as server:
        before = set(_children())  # the module's shared server, say
        with mcp_runtime(server, tmp_path) as runtime:
            session = runtime.start_session()
            assert session.run("hi", timeout=60).ok
            pids = [int(p) for p in _children() if p not in before]
            assert pids, "the server process should be running"
        assert [p for p in pids if _alive(p)] == []


def _children() -> list[str]:
    """The pids of this process's children, whichever of its threads started them."""
    tasks = Path(f"/proc/{os.getpid()}/task").iterdir()
    return [pid for task in tasks for pid in (task / "children").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(")")[-1].split()[0] != "Z"


def test_conv_create_narrows_the_view_and_normalizes_server_slash_tool(
    tmp_path: Path, mcp_url: str
) -> None:
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="go", mcp_allowlist=["t/echo"])]),
        Step(text="child done"),  # the child's only turn
        Step(tool_calls=[call("conv_create", user_instruction="go", mcp_allowlist=["t__nope"])]),
        Step(text="root done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("delegate", timeout=60).last_assistant_message == "root done"
        events = runtime.store.read(session.session_id)
    assert tool_names(server.requests[1])[5:] == ["t__echo"]  # the child's view
    [normalized] = bodies(events, McpAllowlistNormalized)
    assert (normalized.entries, normalized.names) == (["t/echo"], ["t__echo"])
    refused = bodies(events, ToolCallCompleted)[-1]
    assert refused.outcome == "error" and "t__nope" in refused.output
    assert len(runtime_conversations(events)) == 2  # the refused one was never opened
    assert_histories_valid(events)


def test_a_child_inherits_the_callers_view(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(tool_calls=[call("conv_create", user_instruction="go")]),
        Step(text="child done"),
        Step(text="root done"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session(mcp_allowlist=["t__add"])
        assert session.run("delegate", timeout=60).ok
    assert tool_names(server.requests[0])[5:] == tool_names(server.requests[1])[5:] == ["t__add"]


def runtime_conversations(events: list[Event]) -> list[str]:
    return [e.conversation_id or "" for e in events if isinstance(e.body, ConversationOpened)]


def started_and_completed(events: list[Event]) -> list[str]:
    return [
        f"{type(e.body).__name__}:{e.body.call_id}"
        for e in events
        if isinstance(e.body, ToolCallStarted | ToolCallCompleted)
    ]


def test_read_only_calls_of_one_reply_run_concurrently(tmp_path: Path, mcp_url: str) -> None:
    meet = call("t__rendezvous", count=2)
    script = [Step(tool_calls=[meet, meet]), Step(text="we met")]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("meet", timeout=60).ok
        events = runtime.store.read(session.session_id)
    assert [c.output for c in bodies(events, ToolCallCompleted)] == ["met", "met"]
    assert started_and_completed(events) == [
        "ToolCallStarted:call_1",
        "ToolCallStarted:call_2",
        "ToolCallCompleted:call_1",  # outputs in the model's order, whoever finished first
        "ToolCallCompleted:call_2",
    ]


def test_a_writing_call_makes_the_whole_reply_serial(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(
            tool_calls=[
                call("t__rendezvous", count=2, within=0.3),
                call("t__note", key="k", text="v"),
            ]
        ),
        Step(text="alone"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("go", timeout=60).ok
        events = runtime.store.read(session.session_id)
    assert [c.output for c in bodies(events, ToolCallCompleted)] == ["alone", "noted k"]
    assert started_and_completed(events) == [
        "ToolCallStarted:call_1",
        "ToolCallCompleted:call_1",
        "ToolCallStarted:call_2",
        "ToolCallCompleted:call_2",
    ]


def test_an_image_is_kept_as_an_attachment(tmp_path: Path, mcp_url: str) -> None:
    script = [
        Step(tool_calls=[call("t__image")]),
        Step(tool_calls=[call("conv_history", conversation_id="id-2")]),
        Step(text="seen"),
    ]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url)) as runtime,
    ):
        session = runtime.start_session()
        assert session.root_conversation_id == "id-2"
        assert session.run("draw", timeout=60).ok
        events = runtime.store.read(session.session_id)
    image, history = bodies(events, ToolCallCompleted)
    assert image.images and str(image.images[0].image_url).startswith("data:image/png;base64,")
    assert "[1 image(s) returned" in server.requests[1].messages[-1]["content"]
    [entry] = [e for e in json.loads(history.output)["entries"] if e["role"] == "tool"]
    assert entry["attachments"][0]["image_url"] == image.images[0].image_url


def test_git_read_only_calls_run_together_and_a_commit_makes_them_serial(
    tmp_path: Path, git_repo: Path
) -> None:
    git = McpServerConfig(
        command=str(Path(sys.executable).parent / "mcp-server-git"),
        args=["--repository", str(git_repo)],
    )
    repo = str(git_repo)
    status, log = call("git__git_status", repo_path=repo), call("git__git_log", repo_path=repo)
    commit = call("git__git_commit", repo_path=repo, message="nothing staged")
    script = [
        Step(tool_calls=[status, log]),
        Step(tool_calls=[status, log, commit]),
        Step(text="ok"),
    ]
    with ScriptedModelServer(script) as server, mcp_runtime(server, tmp_path, git=git) as runtime:
        session = runtime.start_session()
        assert session.run("look around", timeout=60).ok
        events = runtime.store.read(session.session_id)
    requested = bodies(events, ToolCallRequested)
    assert [r.read_only for r in requested] == [True, True, True, True, False]
    assert [c.outcome for c in bodies(events, ToolCallCompleted)][:4] == ["ok"] * 4
    assert "first commit" in bodies(events, ToolCallCompleted)[1].output
    kinds_seen = [k.split(":")[0] for k in started_and_completed(events)]
    assert kinds_seen[:4] == ["ToolCallStarted"] * 2 + ["ToolCallCompleted"] * 2
    assert kinds_seen[4:] == ["ToolCallStarted", "ToolCallCompleted"] * 3


def test_a_server_that_crashes_is_restarted_and_later_calls_work(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("t__crash")]),
        Step(tool_calls=[call("t__echo", text="back")]),
        Step(text="recovered"),
    ]
    with ScriptedModelServer(script) as server, mcp_runtime(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("crash it", timeout=60).ok
        events = runtime.store.read(session.session_id)
    crashed, echoed = bodies(events, ToolCallCompleted)
    assert crashed.outcome == "error" and "exited with code 3" in crashed.output
    assert "crashing on purpose" in crashed.output  # its stderr, for people
    assert (echoed.outcome, echoed.output) == ("ok", "back")
    [failed] = bodies(events, McpServerFailed)
    assert failed.retry_in_sec is not None  # it will be started again, and was:
    assert [r.attempt for r in bodies(events, McpServerReady)] == [1, 2]


def test_a_tool_list_change_is_recorded_and_offered_next_turn(tmp_path: Path) -> None:
    script = [
        Step(tool_calls=[call("t__grow")]),
        Step(text="grown"),
        Step(tool_calls=[call("t__extra")]),
        Step(text="called it"),
    ]
    with ScriptedModelServer(script) as server, mcp_runtime(server, tmp_path) as runtime:
        session = runtime.start_session()
        with session.subscribe(transient=False) as feed:
            assert session.run("grow", timeout=60).ok
            for item in feed:  # recorded when the server says its list changed
                if isinstance(item, Event) and isinstance(item.body, McpToolsRefreshed):
                    break
        assert session.run("now call it", timeout=60).ok
        events = runtime.store.read(session.session_id)
    assert "t__extra" not in tool_names(server.requests[0])
    assert "t__extra" in tool_names(server.requests[2])
    assert [c.output for c in bodies(events, ToolCallCompleted)] == ["grown", "extra"]


def test_a_call_past_its_timeout_is_a_timeout_for_the_model(tmp_path: Path, mcp_url: str) -> None:
    script = [Step(tool_calls=[call("t__slow", seconds=30)]), Step(text="too slow")]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url, tool_timeout_sec=0.5)) as runtime,
    ):
        session = runtime.start_session()
        assert session.run("wait", timeout=60).ok
        events = runtime.store.read(session.session_id)
    [timed_out] = bodies(events, ToolCallCompleted)
    assert timed_out.outcome == "timeout" and "timed out after 0.5s" in timed_out.output


def test_calls_past_the_session_limit_wait_their_turn(tmp_path: Path, mcp_url: str) -> None:
    meet = call("t__rendezvous", count=2, within=0.3)
    script = [Step(tool_calls=[meet, meet]), Step(text="never met")]
    with ScriptedModelServer(script) as server:
        runtime = runtime_for(
            server,
            tmp_path,
            mcp_servers={"t": at(mcp_url)},
            mcp_limits=McpLimits(per_session=1),
        )
        with runtime:
            session = runtime.start_session()
            assert session.run("meet", timeout=60).ok
            events = runtime.store.read(session.session_id)
    # Read-only, so started together, but one slot: the second waited for the first.
    assert [c.output for c in bodies(events, ToolCallCompleted)] == ["alone", "alone"]


def test_only_conversations_that_need_a_starting_server_wait_for_it(
    tmp_path: Path, mcp_url: str
) -> None:
    # "hung" reads until its stdin closes and never answers initialize; "t", running,
    # connects well within hung's timeout.
    never = "import sys; sys.stdin.buffer.read()"
    hung = McpServerConfig(command=sys.executable, args=["-c", never], startup_timeout_sec=3)
    script = [Step(text="t only"), Step(text="everything")]
    with (
        ScriptedModelServer(script) as server,
        mcp_runtime(server, tmp_path, t=at(mcp_url), hung=hung) as runtime,
    ):
        narrow = runtime.start_session(mcp_allowlist=["t__echo"])
        assert narrow.run("hi", timeout=60).ok
        wide = runtime.start_session()
        assert wide.run("hi", timeout=60).ok
        narrow_events = runtime.store.read(narrow.session_id)
        wide_events = runtime.store.read(wide.session_id)

    def order(events: list[Event]) -> list[str]:
        wanted = McpServerFailed | ModelRequested
        return [type(e.body).__name__ for e in events if isinstance(e.body, wanted)]

    assert order(narrow_events)[0] == "ModelRequested"  # it did not wait for "hung"
    assert order(wide_events) == ["McpServerFailed", "ModelRequested"]  # it waited, in vain
    assert "initialize timed out" in bodies(wide_events, McpServerFailed)[0].reason
    assert tool_names(server.requests[1])[5:] == sorted(tool_names(server.requests[1])[5:])


def test_calls_past_a_conversations_rate_wait_for_the_window(tmp_path: Path, mcp_url: str) -> None:
    meet = call("t__rendezvous", count=2, within=0.3)
    script = [Step(tool_calls=[meet, meet]), Step(text="one at a time")]
    limits = McpLimits(per_conversation_rate=1, rate_window_sec=1.0)
    with ScriptedModelServer(script) as server:
        runtime = runtime_for(server, tmp_path, mcp_servers={"t": at(mcp_url)}, mcp_limits=limits)
        with runtime:
            session = runtime.start_session()
            assert session.run("meet", timeout=60).ok
            events = runtime.store.read(session.session_id)
    # Allowed to run together, but one start per second: the first gave up waiting first.
    assert [c.output for c in bodies(events, ToolCallCompleted)] == ["alone", "alone"]
