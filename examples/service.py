"""An HTTP service over one plait ``Runtime``: sessions, their tasks, and their events as SSE.

Run it (``--offline``: a scripted model server answers, so no network and no key)::

    pip install -e '.[service]'
    python examples/service.py --offline          # http://127.0.0.1:8000, log in .plait/plait.db
    curl -s -X POST localhost:8000/sessions       # {"session_id": "S", "root_conversation_id": ...}
    curl -sN localhost:8000/sessions/S/events &   # the session's log, then its live events
    curl -s -X POST localhost:8000/sessions/S/tasks -d '{"prompt": "hello"}'   # 202 {"task_id"}
    curl -s -X POST localhost:8000/sessions/S/run -d '{"prompt": "again"}'     # the outcome
    curl -s localhost:8000/sessions/S/history; curl -s -X DELETE localhost:8000/sessions/S

``--offline`` is the default when neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` is set;
otherwise the model is ``ModelSettings``': the server at ``OPENAI_BASE_URL`` (else OpenAI's),
the key in ``OPENAI_API_KEY``, the model named by ``PLAIT_MODEL`` (else gpt-4o-mini). The log
is the ``plait`` command's default store: ``plait log S`` and ``plait audit S`` read it too.

``DELETE /sessions/S`` closes a session (its actors stop, the log gets ``SessionClosed``); so
does shutting down, for every session. A closed session answers 409 (but for its events and
audit) until ``POST /sessions/S/resume`` reopens it. One a crash left open resumes when used.

``GET .../events?after=SEQ`` (a ``Last-Event-ID`` header wins) opens with a comment once it
is subscribed and has read the log, then sends each event with a greater seq once, stored ones
first: ``id: <seq>``, ``event: <type>``, ``data: <the event as plait log --json prints it>``;
text deltas come as ``event: delta`` (reasoning as ``event: reasoning``), with no id. It ends
when the session closes. Events a storage policy keeps out of the log are not sent: a stream
resumes from the log. A stream ``feed_limit`` items behind (``create_app``) says ``: lagged
after seq N``, then sends the events after N from the log: the deltas streamed meanwhile are
lost, no event is. Errors are ``{"error": "...", "session_id": ...}``: 404 for no such session
or conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from plait import (
    ContentUnavailableError,
    ModelSettings,
    NotFoundError,
    PlaitError,
    Runtime,
    RuntimeSettings,
    SessionClosedError,
    SessionHandle,
)
from plait.events import AgentMessageDelta, Event, FeedLagged, SessionClosed, Transient, to_jsonl
from plait.replay import audit
from plait.testing import ScriptedModelServer, Step

KEEPALIVE_SEC = 15.0
"""Longest silence on an event stream: a comment then keeps proxies from closing it."""


class TaskBody(msgspec.Struct, forbid_unknown_fields=True):
    """The JSON body of ``POST /sessions/{id}/tasks`` and ``/run``."""

    prompt: str
    """What the task asks."""
    conversation_id: str | None = None
    """Where it runs (``None``: the session's root conversation)."""


def as_json(content: Any, status: int = 200) -> Response:
    """Return ``content`` as JSON; msgspec encodes plait's structs and datetimes."""
    return Response(msgspec.json.encode(content), status, media_type="application/json")


def sse(item: Event | Transient) -> str:
    """Return one server-sent event: a stored event with its seq as id, or a delta."""
    if isinstance(item, Event):
        data = b"".join(to_jsonl([item])).decode().rstrip("\n")
        return f"id: {item.seq}\nevent: {type(item.body).__name__}\ndata: {data}\n\n"
    kind = "delta" if isinstance(item, AgentMessageDelta) else "reasoning"
    return f"event: {kind}\ndata: {msgspec.json.encode(item).decode()}\n\n"


def ids(handle: SessionHandle) -> dict[str, str]:
    """The ids a client needs: the session's and its root conversation's."""
    return {"session_id": handle.session_id, "root_conversation_id": handle.root_conversation_id}


def after_seq(request: Request) -> int:
    """The seq a stream starts after: ``Last-Event-ID`` (a reconnecting client's), else
    ``?after=``, else 0."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not (raw.isascii() and raw.isdigit()):
        raise HTTPException(400, f"after / Last-Event-ID: expected a seq (int >= 0), got {raw!r}")
    return int(raw)


class Service:
    """The endpoints, and the sessions this process has opened."""

    def __init__(self, runtime: Runtime, stopping: Callable[[], bool], feed_limit: int) -> None:
        self.runtime = runtime
        self.stopping = stopping
        self.feed_limit = feed_limit
        self.handles: dict[str, SessionHandle] = {}
        self.closing: set[str] = set()  # sessions a DELETE is closing
        self._opening = asyncio.Lock()  # resume and register as one: no DELETE between them

    async def start(self, request: Request) -> Response:
        handle = await asyncio.to_thread(self.runtime.start_session)  # a durable write
        self.handles[handle.session_id] = handle
        return as_json(ids(handle), 201)

    async def resume(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        if session_id in self.closing:
            raise HTTPException(409, f"session {session_id} is closing")
        handle = await self._lookup(session_id, reopen=True)
        assert handle is not None  # reopened
        return as_json(ids(handle))

    async def submit(self, request: Request) -> Response:
        handle, body = await self._task(request)
        task_id = await handle.asubmit(body.prompt, conversation_id=body.conversation_id)
        return as_json({"task_id": task_id}, 202)

    async def run(self, request: Request) -> Response:
        handle, body = await self._task(request)
        outcome = await handle.arun(body.prompt, conversation_id=body.conversation_id)
        return as_json({**msgspec.to_builtins(outcome), "ok": outcome.ok})

    async def interrupt(self, request: Request) -> Response:
        handle = await self._open(request)
        await handle.ainterrupt()
        return as_json({"session_id": handle.session_id}, 202)

    async def close(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        handle = await self._lookup(session_id)
        if handle is not None and session_id not in self.closing:  # None: closed already
            self.closing.add(session_id)
            try:
                await handle.aclose()
            finally:
                self.handles.pop(session_id, None)
                self.closing.discard(session_id)
        return Response(status_code=204)

    async def history(self, request: Request) -> Response:
        handle = await self._open(request)
        return as_json(handle.history(request.query_params.get("conversation_id")))

    async def conversations(self, request: Request) -> Response:
        return as_json((await self._open(request)).conversations())

    async def audit(self, request: Request) -> Response:
        store, session_id = self.runtime.store, request.path_params["session_id"]
        return as_json(await asyncio.to_thread(audit, store, session_id))  # reads the whole log

    async def events(self, request: Request) -> Response:
        after, session_id = after_seq(request), request.path_params["session_id"]
        stream = self._stream(session_id, await self._lookup(session_id), after)
        headers = {"Cache-Control": "no-cache"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def _stream(
        self, session_id: str, handle: SessionHandle | None, after: int
    ) -> AsyncIterator[str]:
        """Send the stored events after ``after``, then the live ones, each once."""
        with contextlib.ExitStack() as stack:  # the feed closes however the stream ends
            # Subscribe, then read the log: an event recorded in between is in both (and is
            # skipped the second time by its seq); none can fall between them.
            limit = self.feed_limit
            feed = None if handle is None else stack.enter_context(handle.subscribe(limit=limit))
            stored = await asyncio.to_thread(self.runtime.store.read, session_id, after=after)
            # From here what follows misses nothing. (Said after the read: deltas the feed took
            # meanwhile come after the events read, so a task started now streams in order.)
            yield f": session {session_id}\n\n"
            last = after
            for event in stored:
                last = event.seq
                yield sse(event)
            heard = time.monotonic()
            # Live until the session closes (no handle; or a DELETE since, which drops it) or
            # the server stops. A client that leaves cancels this generator where it waits.
            while feed is not None and not feed.closed and self.handles.get(session_id) is handle:
                if self.stopping():
                    return
                if (item := await feed.aget(timeout=1.0)) is None:  # a stop is seen within 1 s
                    if time.monotonic() - heard > KEEPALIVE_SEC:
                        heard = time.monotonic()
                        yield ": keep-alive\n\n"
                    continue
                heard = time.monotonic()
                items: list[Event | Transient] = [item]
                if isinstance(item, FeedLagged):  # this stream fell behind: the log has the rest
                    yield f": lagged after seq {item.after_seq}\n\n"
                    items = [*await asyncio.to_thread(feed.catch_up, item)]
                for each in items:
                    if not isinstance(each, Event) or each.seq > last:  # else sent already
                        last = each.seq if isinstance(each, Event) else last
                        yield sse(each)
                    if isinstance(each, Event) and isinstance(each.body, SessionClosed):
                        return

    async def _task(self, request: Request) -> tuple[SessionHandle, TaskBody]:
        try:
            body = msgspec.json.decode(await request.body(), type=TaskBody)
        except msgspec.DecodeError as exc:  # a ValidationError too: it says which field
            expected = 'a JSON object {"prompt": str, "conversation_id": str (optional)}'
            raise HTTPException(400, f"expected {expected}: {exc}") from None
        # Once the session is open, nothing is awaited until the task is queued: a DELETE
        # cannot close it in between. (A conversation it lacks: UnknownConversationError.)
        return await self._open(request), body

    async def _open(self, request: Request) -> SessionHandle:
        """The handle of the request's session; ``SessionClosedError`` if it is closed."""
        session_id = request.path_params["session_id"]
        handle = await self._lookup(session_id)
        if handle is None or session_id in self.closing:
            raise SessionClosedError(session_id)
        return handle

    async def _lookup(self, session_id: str, *, reopen: bool = False) -> SessionHandle | None:
        """The session's handle, resumed from the store if this process has not opened it
        (a crash cut it off); ``None`` when it is closed, unless ``reopen``."""
        if session_id not in self.handles:
            async with self._opening:
                if session_id not in self.handles:
                    handle = await asyncio.to_thread(self._resume, session_id, reopen)
                    if handle is None:
                        return None
                    self.handles[session_id] = handle
        return self.handles[session_id]

    def _resume(self, session_id: str, reopen: bool) -> SessionHandle | None:
        """Resume the session; ``None`` if it is closed (Runtime.resume reopens it), unless
        ``reopen``. ``UnknownSessionError`` if the store has no such session."""
        store = self.runtime.store
        last = store.read(session_id, after=max(store.last_seq(session_id) - 1, 0))
        if last and isinstance(last[-1].body, SessionClosed) and not reopen:
            return None
        return self.runtime.resume(session_id)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return as_json({"error": exc.detail}, exc.status_code)

    async def plait_error(self, request: Request, exc: Exception) -> Response:
        """A ``PlaitError`` as a JSON error that says which session; never a traceback."""
        error, status, session_id = str(exc), 500, request.path_params.get("session_id")
        if isinstance(exc, NotFoundError):  # no such session, or no such conversation in it
            status = 404
        elif isinstance(exc, SessionClosedError):
            error, status = f"{exc} (POST /sessions/{exc.session_id}/resume reopens it)", 409
        elif isinstance(exc, ContentUnavailableError):  # its storage policy did not keep it
            status = 409
        return as_json({"error": error, "session_id": session_id}, status)


def create_app(
    runtime: Runtime, *, stopping: Callable[[], bool] = lambda: False, feed_limit: int = 10_000
) -> Starlette:
    """Return the service's ASGI app on ``runtime``; its shutdown closes the runtime. Event
    streams end once ``stopping()`` is true (the server would otherwise wait for them); one
    that falls ``feed_limit`` items behind (plait's default) catches up from the log."""
    service = Service(runtime, stopping, feed_limit)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(runtime.close)  # waits for running tasks' ends: not on the loop

    async def internal_error(request: Request, exc: Exception) -> Response:
        return as_json({"error": "internal error (the service's log has it)"}, 500)

    one = "/sessions/{session_id}"
    routes = [
        Route("/sessions", service.start, methods=["POST"]),
        Route(one, service.close, methods=["DELETE"]),
        Route(f"{one}/resume", service.resume, methods=["POST"]),
        Route(f"{one}/tasks", service.submit, methods=["POST"]),
        Route(f"{one}/run", service.run, methods=["POST"]),
        Route(f"{one}/interrupt", service.interrupt, methods=["POST"]),
        Route(f"{one}/events", service.events, methods=["GET"]),
        Route(f"{one}/history", service.history, methods=["GET"]),
        Route(f"{one}/conversations", service.conversations, methods=["GET"]),
        Route(f"{one}/audit", service.audit, methods=["GET"]),
    ]
    handlers = {
        HTTPException: service.http_error,
        PlaitError: service.plait_error,
        Exception: internal_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)


def offline_script(replies: int = 5000) -> list[Step]:
    """The scripted model's replies, streamed a few characters at a time as a model's are."""
    text = "Reply {n} from the offline model: set OPENAI_API_KEY to talk to a real one."
    return [Step(text=text.format(n=n), chunk_chars=6, chunk_delay=0.03) for n in range(replies)]


def main(argv: list[str] | None = None) -> None:
    """Serve sessions over HTTP until interrupted."""
    parser = argparse.ArgumentParser(description="Serve plait sessions over HTTP.")
    parser.add_argument("--db", default=".plait/plait.db", help="the SQLite log (or a store URL)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    offline = "answer from a scripted model (the default without OPENAI_API_KEY/_BASE_URL)"
    parser.add_argument("--offline", action="store_true", help=offline)
    args = parser.parse_args(argv)
    configured = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    with contextlib.ExitStack() as stack:
        if args.offline or not configured:
            scripted = stack.enter_context(ScriptedModelServer(offline_script()))
            settings = ModelSettings(
                base_url=scripted.base_url, api_key="offline", model=scripted.model
            )
        else:
            settings = ModelSettings(model=os.environ.get("PLAIT_MODEL") or "gpt-4o-mini")
        try:
            runtime = Runtime(args.db, RuntimeSettings(model=settings))
        except PlaitError as exc:  # no key, a store it cannot open...
            parser.exit(1, f"{parser.prog}: {exc}\n")
        # Event streams end when uvicorn is told to stop (`server` is bound by then); a /run
        # waiting for its task gets 10 s more, then is cancelled.
        app = create_app(runtime, stopping=lambda: server.should_exit)
        config = uvicorn.Config(
            app, host=args.host, port=args.port, ws="none", timeout_graceful_shutdown=10
        )
        server = uvicorn.Server(config)
        server.run()


if __name__ == "__main__":
    main()
