"""``plait mcp-server``: plait as an MCP server, over stdio or streamable HTTP, so that an MCP
client (Claude Desktop, Cursor, another agent) can hand it work (docs/mcp-server.md).

Its tools are ``run`` and ``reply`` (a task in a new or an existing session, answered with how
it ended), ``interrupt``, and the read-only ``history``, ``audit`` and ``sessions``, which
answer what ``plait history``, ``plait audit`` and ``plait sessions`` print as JSON. Every
session runs on a ``Runtime`` on the configured store, so its log is the same as ``plait exec``
would write: ``plait audit`` and ``plait replay`` read it. Importing this module imports
``mcp``: the parser reaches it only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

import anyio
import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from plait._config import Config
from plait._errors import PlaitError
from plait.actors import ModelSettings
from plait.cli._common import config_of, err, find_session, make_runtime, model_settings, store_of
from plait.cli._instructions import session_instructions
from plait.cli._log_commands import history_rows, session_rows
from plait.cli._mcp_live import Caller, ClientApprover, Ctx, follow_task
from plait.cli._output import audit_fields
from plait.cli._stopping import Signals, Stopped, stop_runtimes
from plait.cli._verbose import watch_servers
from plait.cli._version import plait_version
from plait.events import ApprovalPolicy, EventStore, StoragePolicy
from plait.runtime import Runtime, SessionHandle, Status

__all__ = ["serve"]

READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)
STOPS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)

RUN_DOC = (
    "Start a new plait session and run the prompt as its first task; answer how it ended: "
    "{session_id, conversation_id, content (the final assistant message), status, detail}. "
    "Its text and tool calls stream as progress (or log) notifications while it runs; a tool "
    "call its approval policy asks for is put to you as an elicitation request."
)
REPLY_DOC = (
    "Run the prompt as the next task of an existing session's root conversation (resumed "
    "from the store if this server does not hold it); answer as run does."
)
INTERRUPT_DOC = (
    "Interrupt the task running in a session this server holds: its run or reply call "
    "answers with status interrupted."
)
HISTORY_DOC = "A conversation's messages (the root's by default), as the model is shown them."
AUDIT_DOC = (
    "Every tool call of a session: conversation, tool, arguments, approval and who decided "
    "it, outcome, duration."
)
SESSIONS_DOC = "The stored sessions, oldest first: id, events, start, model, open or closed, owner."

SessionId = Annotated[str, Field(description="a session id, or a unique prefix of one")]
Prompt = Annotated[str, Field(description="what to do: the task's input")]


class TaskResult(TypedDict):
    """How a run or reply task (and the continuations it chained) ended."""

    session_id: str
    conversation_id: str
    content: str | None
    """The task's final assistant message (what there was of it, if cut off)."""
    status: Status
    """completed, truncated, filtered, model_error, interrupted, failed, crashed or dropped."""
    detail: str
    """What happened, when it did not complete."""


class Interrupted(TypedDict):
    """What interrupt did."""

    session_id: str
    interrupted: bool
    """Whether a task was running or waiting (it ends ``interrupted``)."""


class History(TypedDict):
    """A conversation's messages, as `plait history --json` prints them."""

    session_id: str
    conversation_id: str
    messages: list[dict[str, Any]]


class Audit(TypedDict):
    """A session's tool calls, as `plait audit --json` prints them."""

    session_id: str
    calls: list[dict[str, Any]]


class Sessions(TypedDict):
    """The stored sessions, as `plait sessions --json` prints them."""

    sessions: list[dict[str, Any]]


def serve(args: argparse.Namespace) -> int:
    """Serve plait's tools over stdio, or streamable HTTP with ``--http PORT``, until the
    client leaves (stdin closes) or the process is interrupted."""
    config = config_of(args)
    model = model_settings(config)
    with store_of(config, create=True) as store:
        face = Face(config, model, store)
        try:
            server = face.server()
            what = f"store {config.store.url}, model {model.model}"
            # SIGTERM or SIGINT hands the sessions back, their running tasks cut after the
            # grace period (docs/processes.md#stopping); over HTTP the first ends uvicorn's
            # serving (its requests end first), and the block's end raises it.
            signals = Signals(raising=args.http is None)
            with signals:
                if args.http is None:
                    err(f"plait mcp-server on stdio: {what}")
                    server.run("stdio")
                else:
                    anyio.run(_serve_http, server, args.host, args.http, what, signals)
        except Stopped as stopped:
            stopped.line = stop_runtimes(face.runtimes(), args.grace_sec, stopped)
            raise
        finally:
            face.close()
    return 0


async def _serve_http(
    server: MCPServer[Any], host: str, port: int, what: str, signals: Signals
) -> None:
    """Serve streamable HTTP at ``/mcp``; say where once the socket listens (``port`` 0: any
    free port), so that whoever reads the line can connect at once."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    err(f"plait mcp-server listening on http://{shown}:{sock.getsockname()[1]}/mcp: {what}")
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")

    class Served(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # plait's own handlers stay: uvicorn's would take the signal, then raise it again
            # as it ends, and a signal seen twice is a second signal, which exits at once.
            yield

    served = Served(config)
    signals.on_first = lambda: setattr(served, "should_exit", True)
    if signals.first is None:  # one that came before is raised as the block ends
        await served.serve(sockets=[sock])


class Face:
    """The server's state: a runtime per model name on one store, and the sessions it holds."""

    def __init__(self, config: Config, model: ModelSettings, store: EventStore) -> None:
        self.config = config
        self.model = model
        self.store = store
        self.approver = ClientApprover()
        self._lock = threading.Lock()
        self._runtimes: dict[str, Runtime] = {}
        self._handles: dict[str, SessionHandle] = {}
        self.runtime(None)  # a configuration error shows before the server starts

    def runtime(self, model: str | None) -> Runtime:
        """The runtime that runs new sessions with ``model`` (default: the configured one)."""
        name = model or self.model.model
        with self._lock:
            runtime = self._runtimes.get(name)
            if runtime is None:
                settings = msgspec.structs.replace(self.model, model=name)
                runtime = make_runtime(self.config, settings, self.store, self.approver)
                self._runtimes[name] = runtime
            return runtime

    def runtimes(self) -> list[Runtime]:
        """The runtimes made so far, one per model name."""
        with self._lock:
            return list(self._runtimes.values())

    def close(self) -> None:
        """Close every session and runtime (a running task ends ``interrupted``)."""
        for runtime in self._runtimes.values():
            runtime.close()

    def server(self) -> MCPServer[Any]:
        """The MCP server with plait's tools."""
        server: MCPServer[Any] = MCPServer(
            "plait",
            instructions="plait runs LLM agent sessions: `run` starts one with a task, `reply` "
            "goes on with it; every session is logged, auditable and replayable.",
            version=plait_version(),  # the client's initialize result names it
            log_level="WARNING",
        )
        server.add_tool(self.run, "run", "Run a task in a new session", RUN_DOC, RUNS)
        server.add_tool(self.reply, "reply", "Go on with a session", REPLY_DOC, RUNS)
        server.add_tool(self.interrupt, "interrupt", "Interrupt a session", INTERRUPT_DOC, STOPS)
        server.add_tool(self.history, "history", "A conversation's history", HISTORY_DOC, READS)
        server.add_tool(self.audit, "audit", "A session's tool calls", AUDIT_DOC, READS)
        server.add_tool(self.sessions, "sessions", "The stored sessions", SESSIONS_DOC, READS)
        return server

    async def run(
        self,
        prompt: Prompt,
        ctx: Ctx,
        model: Annotated[str | None, Field(description="the model name")] = None,
        base_instructions: Annotated[
            str | None, Field(description="the system prompt of the session's conversations")
        ] = None,
        approval_policy: Annotated[
            ApprovalPolicy | None,
            Field(description="which MCP tool calls wait for the client's approval"),
        ] = None,
        storage_policy: Annotated[
            str | None,
            Field(description="what the log keeps: full, headers_only, none or ttl:7d"),
        ] = None,
    ) -> TaskResult:
        with _tool_errors():
            storage = None if storage_policy is None else _storage(storage_policy)
            runtime = await anyio.to_thread.run_sync(self.runtime, model)
            since = datetime.now(UTC)
            handle = await anyio.to_thread.run_sync(
                lambda: runtime.start_session(
                    base_instructions=base_instructions,
                    user_instructions=session_instructions(),
                    storage_policy=storage,
                    approval_policy=approval_policy,
                )
            )
            watch_servers(handle, self.config, since, 0)
            with self._lock:
                self._handles[handle.session_id] = handle
            return await self._task(handle, prompt, ctx)

    async def reply(self, session_id: SessionId, prompt: Prompt, ctx: Ctx) -> TaskResult:
        with _tool_errors():
            handle = await anyio.to_thread.run_sync(self._resume, session_id)
            return await self._task(handle, prompt, ctx)

    async def interrupt(self, session_id: SessionId) -> Interrupted:
        with _tool_errors():
            found = await anyio.to_thread.run_sync(find_session, self.store, session_id)
            with self._lock:
                handle = self._handles.get(found)
            if handle is None or handle.closed or handle.passive or handle.idle_now():
                return Interrupted(session_id=found, interrupted=False)  # nothing runs here
            handle.interrupt()
            return Interrupted(session_id=found, interrupted=True)

    async def history(
        self,
        session_id: SessionId,
        conversation_id: Annotated[
            str | None, Field(description="a conversation id or prefix (default: the root)")
        ] = None,
    ) -> History:
        with _tool_errors():

            def read() -> History:
                found = find_session(self.store, session_id)
                cid, rows = history_rows(self.store, found, conversation_id)
                return History(session_id=found, conversation_id=cid, messages=rows)

            return await anyio.to_thread.run_sync(read)

    async def audit(self, session_id: SessionId) -> Audit:
        from plait.replay import audit

        with _tool_errors():

            def read() -> Audit:
                found = find_session(self.store, session_id)
                rows = [audit_fields(row) for row in audit(self.store, found)]
                return Audit(session_id=found, calls=rows)

            return await anyio.to_thread.run_sync(read)

    async def sessions(self) -> Sessions:
        with _tool_errors():
            rows = await anyio.to_thread.run_sync(lambda: list(session_rows(self.store)))
            return Sessions(sessions=rows)

    def _resume(self, session_id: str) -> SessionHandle:
        """The session's handle: the one this server holds, else resumed from the store."""
        found = find_session(self.store, session_id)
        with self._lock:
            handle = self._handles.get(found)
            if handle is not None and not handle.closed:
                return handle
        before, since = self.store.last_seq(found), datetime.now(UTC)
        handle = self.runtime(None).resume(found)
        watch_servers(handle, self.config, since, before)
        with self._lock:
            self._handles[found] = handle
        return handle

    async def _task(self, handle: SessionHandle, prompt: str, ctx: Ctx) -> TaskResult:
        """Run ``prompt`` in the session's root conversation, telling the client as it goes."""
        caller = Caller(ctx)
        with self.approver.waiting(handle.session_id, caller):
            outcome = await follow_task(handle, caller, prompt)
        return TaskResult(
            session_id=handle.session_id,
            conversation_id=outcome.conversation_id,
            content=outcome.last_assistant_message,
            status=outcome.status,
            detail=outcome.detail,
        )


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Answer a plait error as the tool's error, in one line (no traceback reaches the
    client)."""
    try:
        yield
    except PlaitError as exc:
        raise ToolError(" ".join(str(exc).split()) or type(exc).__name__) from exc


def _storage(text: str) -> StoragePolicy:
    try:
        return StoragePolicy.parse(text)
    except ValueError as exc:
        raise ToolError(str(exc)) from None  # it names the policy and what is accepted
