"""examples/service.py under a real uvicorn: sessions, tasks and their event streams over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Collection, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import httpx2
import uvicorn
from scripted import runtime_for

from plait.events import SessionClosed, SqliteStore
from plait.testing import ScriptedModelServer, Step

SERVICE_PY = Path(__file__).resolve().parents[2] / "examples" / "service.py"
WAIT = 30.0
"""Seconds to wait for anything: generous, for two loaded cores."""
ENDS = {"TaskCompleted", "TurnAborted", "TaskDropped"}
"""The events that end a task."""


def load_service() -> ModuleType:
    """Import examples/service.py (not a package): as a script would run it, by its path."""
    spec = importlib.util.spec_from_file_location("plait_service_example", SERVICE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


service = load_service()


@contextlib.contextmanager
def uvicorn_serving(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port, in a thread; yield its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", ws="none", lifespan="on"
    )
    server = uvicorn.Server(config)
    stopped = threading.Event()

    def serve() -> None:
        try:
            server.run()
        finally:
            stopped.set()

    thread = threading.Thread(target=serve, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started:  # uvicorn has no event to wait on: look between waits on ours
        if stopped.wait(0.02):
            raise RuntimeError("uvicorn stopped before it served (its log says why)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"uvicorn did not start within {WAIT} s")
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        assert stopped.wait(WAIT), "uvicorn did not stop"
        thread.join(WAIT)


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, steps: list[Step], **app_options: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """The service (``create_app(runtime, **app_options)``) on a SQLite log in ``tmp_path`` and
    a model that answers ``steps``; yield an HTTP client for it."""
    with ScriptedModelServer(steps) as model:
        runtime = runtime_for(model, tmp_path)
        try:
            with uvicorn_serving(service.create_app(runtime, **app_options)) as url:
                async with httpx2.AsyncClient(base_url=url, timeout=WAIT) as client:
                    yield client
        finally:
            runtime.close()  # the app's shutdown closed it; this is for a start that failed


class Message(NamedTuple):
    """One server-sent event."""

    id: int | None
    event: str
    data: dict[str, Any]


class EventStream:
    """A client's view of ``GET /sessions/{id}/events``, message by message."""

    def __init__(self, response: httpx2.Response) -> None:
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        self._lines = response.aiter_lines()
        self.comments: list[str] = []
        """The comment lines read so far (``: ...``), which ``next`` skips."""

    async def next(self) -> Message | None:
        """The next message; ``None`` once the server has ended the stream."""
        fields: dict[str, str] = {}
        async for line in self._lines:
            if not line and "data" in fields:
                seq = int(fields["id"]) if "id" in fields else None
                return Message(seq, fields["event"], json.loads(fields["data"]))
            if line.startswith(":"):
                self.comments.append(line)
            elif line:
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        return None

    async def subscribed(self) -> None:
        """Wait for the opening comment: from then on the stream misses nothing."""
        async for line in self._lines:
            if line.startswith(": session "):
                return
        raise AssertionError("the stream ended before it opened")

    async def until(self, names: Collection[str], task_id: str) -> list[Message]:
        """Read up to the first of ``names`` that is ``task_id``'s, and return what was read."""
        seen: list[Message] = []
        while (message := await self.next()) is not None:
            seen.append(message)
            if message.event in names and message.data.get("task_id") == task_id:
                return seen
        raise AssertionError(f"the stream ended before {names}: {[m.event for m in seen]}")

    async def rest(self) -> list[Message]:
        """Read until the server ends the stream."""
        seen: list[Message] = []
        while (message := await self.next()) is not None:
            seen.append(message)
        return seen


@contextlib.asynccontextmanager
async def events(
    client: httpx2.AsyncClient, session_id: str, after: int = 0, last_event_id: int | None = None
) -> AsyncIterator[EventStream]:
    """Open a session's event stream; yield it once it is subscribed."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    path = f"/sessions/{session_id}/events?after={after}"
    async with client.stream("GET", path, headers=headers) as response:
        stream = EventStream(response)
        await stream.subscribed()
        yield stream


async def new_session(client: httpx2.AsyncClient) -> str:
    created = await client.post("/sessions")
    assert created.status_code == 201, created.text
    assert set(created.json()) == {"session_id", "root_conversation_id"}
    return str(created.json()["session_id"])


def answer(n: int) -> str:
    return f"answer {n}: " + "abcdefgh" * 4  # 10 chunks of 4 characters: about 0.1 s


async def test_concurrent_clients_each_stream_their_own_task(tmp_path: Path) -> None:
    clients = 20
    steps = [Step(text=answer(n), chunk_chars=4, chunk_delay=0.01) for n in range(clients)]

    async def one_client(client: httpx2.AsyncClient, n: int) -> str:
        session_id = await new_session(client)
        async with events(client, session_id) as stream:
            posted = await client.post(f"/sessions/{session_id}/tasks", json={"prompt": f"q{n}"})
            assert posted.status_code == 202, posted.text
            task_id = posted.json()["task_id"]
            seen = await stream.until(ENDS, task_id)
        stored = [m for m in seen if m.id is not None]
        seqs = [m.id for m in stored]
        assert seqs == list(range(1, len(seqs) + 1))  # from the first, none missing, none twice
        assert [m.data["seq"] for m in stored] == seqs
        assert {m.data["stream"] for m in stored} == {session_id}
        assert {m.data["task_id"] for m in seen if m.event == "delta"} == {task_id}
        streamed = "".join(m.data["text"] for m in seen if m.event == "delta")
        ended = seen[-1]
        assert ended.event == "TaskCompleted", ended
        assert ended.data["body"]["last_assistant_message"] == streamed
        history = await client.get(f"/sessions/{session_id}/history")
        assert history.status_code == 200, history.text
        assert history.json()[-2:] == [
            {"role": "user", "content": f"q{n}"},
            {"role": "assistant", "content": streamed},
        ]
        return streamed

    async with serving(tmp_path, steps) as client, asyncio.timeout(3 * WAIT):
        answers = await asyncio.gather(*(one_client(client, n) for n in range(clients)))
    # Each client saw one whole answer, and no two the same one: nothing crossed sessions.
    assert sorted(answers) == sorted(step.text for step in steps)


async def test_an_event_stream_resumes_after_the_last_event_id(tmp_path: Path) -> None:
    async with serving(tmp_path, [Step(text="hello there", chunk_chars=3)]) as client:
        session_id = await new_session(client)
        ran = await client.post(f"/sessions/{session_id}/run", json={"prompt": "hi"})
        assert ran.status_code == 200, ran.text
        task_id = ran.json()["task_id"]
        async with events(client, session_id, after=0) as stream:
            first = await stream.until(ENDS, task_id)
        assert [m.event for m in first if m.id is None] == []  # a finished task: the log only
        middle = first[len(first) // 2].id
        assert middle is not None
        # A reconnecting EventSource sends Last-Event-ID with the URL it first used.
        async with events(client, session_id, after=0, last_event_id=middle) as stream:
            second = await stream.until(ENDS, task_id)
        assert second == first[len(first) // 2 + 1 :]


async def test_a_stream_opened_mid_task_catches_up_from_the_log_then_goes_live(
    tmp_path: Path,
) -> None:
    steps = [Step(text="x" * 100, chunk_chars=1, chunk_delay=0.01)]  # about 1 s
    async with serving(tmp_path, steps) as client:
        session_id = await new_session(client)
        async with events(client, session_id) as early:
            posted = await client.post(f"/sessions/{session_id}/tasks", json={"prompt": "go"})
            task_id = posted.json()["task_id"]
            await early.until({"delta"}, task_id)
            async with events(client, session_id, after=0) as late:
                seen_late = await late.until(ENDS, task_id)
            seen_early = await early.until(ENDS, task_id)
    stored_early = [m for m in seen_early if m.id is not None]
    stored_late = [m for m in seen_late if m.id is not None]
    assert [m.id for m in stored_late] == list(range(1, len(stored_late) + 1))
    assert stored_early and stored_late[-len(stored_early) :] == stored_early
    assert stored_late[-1].data["body"]["last_assistant_message"] == "x" * 100


async def test_a_stream_that_falls_behind_still_sends_every_event_once(tmp_path: Path) -> None:
    # The app's feeds hold 2 items: five replies' deltas, streamed with no delay, and the events
    # recorded together overflow the stream's feed before its loop takes them, again and again,
    # so events too come from the log (with 3, often only deltas are lost). The client reads
    # nothing until the last task is over.
    tasks, text = 5, "y" * 200
    steps = [Step(text=text, chunk_chars=1) for _ in range(tasks)]
    async with serving(tmp_path, steps, feed_limit=2) as client:
        session_id = await new_session(client)
        one = f"/sessions/{session_id}"
        async with events(client, session_id) as stream:
            for n in range(tasks - 1):  # queued: the last one, /run, ends after them
                posted = await client.post(f"{one}/tasks", json={"prompt": f"q{n}"})
                assert posted.status_code == 202, posted.text
            ran = await client.post(f"{one}/run", json={"prompt": "last"})
            assert ran.status_code == 200, ran.text
            seen = await stream.until(ENDS, ran.json()["task_id"])
    assert any(c.startswith(": lagged after seq ") for c in stream.comments), stream.comments
    stored = [m for m in seen if m.id is not None]
    assert [m.id for m in stored] == list(range(1, len(stored) + 1))  # none missing, none twice
    ended = [m.data["body"]["last_assistant_message"] for m in stored if m.event in ENDS]
    assert ended == [text] * tasks
    with SqliteStore(tmp_path / "plait.db") as store:
        log = store.read(session_id)
    assert [(m.id, m.event) for m in stored] == [(e.seq, type(e.body).__name__) for e in log[:-1]]
    assert isinstance(log[-1].body, SessionClosed)  # the app's shutdown closed it


async def test_an_interrupted_task_shows_in_the_stream_and_a_closed_session_refuses_tasks(
    tmp_path: Path,
) -> None:
    steps = [Step(text="word " * 400, chunk_chars=5, chunk_delay=0.01), Step(text="Back.")]
    async with serving(tmp_path, steps) as client:
        session_id = await new_session(client)
        async with events(client, session_id) as stream:
            posted = await client.post(f"/sessions/{session_id}/tasks", json={"prompt": "talk"})
            task_id = posted.json()["task_id"]
            await stream.until({"delta"}, task_id)
            interrupted = await client.post(f"/sessions/{session_id}/interrupt")
            assert interrupted.status_code == 202, interrupted.text
            ended = (await stream.until(ENDS, task_id))[-1]
            assert ended.event == "TurnAborted"
            assert (ended.data["body"]["reason"], ended.data["body"]["cause"]) == (
                "interrupted",
                "user",
            )
            closed = await client.delete(f"/sessions/{session_id}")
            assert closed.status_code == 204 and closed.content == b""
            rest = await stream.rest()  # the server ends the stream after the close
        assert rest[-1].event == "SessionClosed"
        again = await client.post(f"/sessions/{session_id}/tasks", json={"prompt": "more"})
        assert again.status_code == 409
        hint = f"POST /sessions/{session_id}/resume reopens it"
        said = f"session {session_id} is closed ({hint})"
        assert again.json() == {"error": said, "session_id": session_id}
        assert (await client.post(f"/sessions/{session_id}/interrupt")).status_code == 409
        assert (await client.get(f"/sessions/{session_id}/history")).status_code == 409
        assert (await client.delete(f"/sessions/{session_id}")).status_code == 204  # twice: fine
        reopened = await client.post(f"/sessions/{session_id}/resume")
        assert (reopened.status_code, reopened.json()["session_id"]) == (200, session_id)
        ran = await client.post(f"/sessions/{session_id}/run", json={"prompt": "more"})
        assert ran.json()["last_assistant_message"] == "Back."


async def test_a_restarted_service_keeps_closed_sessions_closed_until_resumed(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, [Step(text="First.")]) as client:
        session_id = await new_session(client)
        first = await client.post(f"/sessions/{session_id}/run", json={"prompt": "one"})
        assert first.json()["last_assistant_message"] == "First."
    # The shutdown closed the session; a new process on the same log reads it, and resumes
    # it only when asked.
    async with serving(tmp_path, [Step(text="Second.")]) as client:
        async with events(client, session_id) as stream:
            logged = await stream.rest()  # the log only: the stream ends at its SessionClosed
        assert [m.event for m in logged][-2:] == ["TaskCompleted", "SessionClosed"]
        refused = await client.post(f"/sessions/{session_id}/tasks", json={"prompt": "two"})
        assert refused.status_code == 409, refused.text
        assert (await client.post(f"/sessions/{session_id}/resume")).status_code == 200
        ran = await client.post(f"/sessions/{session_id}/run", json={"prompt": "two"})
        assert ran.json()["last_assistant_message"] == "Second."
        history = (await client.get(f"/sessions/{session_id}/history")).json()
        assert [m["content"] for m in history] == ["one", "First.", "two", "Second."]


async def test_bad_requests_get_a_json_error_that_names_the_problem(tmp_path: Path) -> None:
    async with serving(tmp_path, []) as client:
        session_id = await new_session(client)
        one, hi = f"/sessions/{session_id}", {"json": {"prompt": "hi"}}
        elsewhere = {"json": {"prompt": "hi", "conversation_id": "c9"}}
        cases: list[tuple[str, str, dict[str, Any], int, str]] = [
            ("POST", f"{one}/tasks", {"content": b"not json"}, 400, "JSON is malformed"),
            ("POST", f"{one}/tasks", {"json": {}}, 400, "missing required field `prompt`"),
            ("POST", f"{one}/run", {"json": {"prompt": 3}}, 400, "got `int` - at `$.prompt`"),
            ("POST", f"{one}/tasks", elsewhere, 404, f"session {session_id}: no conversation c9"),
            ("POST", "/sessions/nope/tasks", hi, 404, "no session nope"),
            ("POST", "/sessions/nope/run", hi, 404, "no session nope"),
            ("POST", "/sessions/nope/interrupt", {}, 404, "no session nope"),
            ("POST", "/sessions/nope/resume", {}, 404, "no session nope"),
            ("GET", "/sessions/nope/events", {}, 404, "no session nope"),
            ("GET", "/sessions/nope/history", {}, 404, "no session nope"),
            ("GET", "/sessions/nope/audit", {}, 404, "no session nope"),
            ("DELETE", "/sessions/nope", {}, 404, "no session nope"),
            ("GET", f"{one}/events?after=x", {}, 400, "expected a seq (int >= 0), got 'x'"),
            ("GET", f"{one}/history?conversation_id=c9", {}, 404, "no conversation c9"),
            ("GET", "/nowhere", {}, 404, "Not Found"),
        ]  # fmt: skip
        for method, path, options, status, said in cases:
            response = await client.request(method, path, **options)
            where = f"{method} {path} {options}: {response.status_code} {response.text}"
            assert response.status_code == status, where
            assert response.headers["content-type"] == "application/json", where
            assert said in response.json()["error"], where


async def test_run_answers_the_outcome_and_audit_lists_no_tool_calls(tmp_path: Path) -> None:
    async with serving(tmp_path, [Step(text="Done.")]) as client:
        session_id = await new_session(client)
        ran = await client.post(f"/sessions/{session_id}/run", json={"prompt": "do it"})
        assert ran.status_code == 200, ran.text
        outcome = ran.json()
        assert (outcome["status"], outcome["ok"], outcome["last_assistant_message"]) == (
            "completed",
            True,
            "Done.",
        )
        audit = await client.get(f"/sessions/{session_id}/audit")
        assert (audit.status_code, audit.json()) == (200, [])
        conversations = (await client.get(f"/sessions/{session_id}/conversations")).json()
        assert [c["id"] for c in conversations] == [outcome["conversation_id"]]
        assert conversations[0]["message_count"] == 2
