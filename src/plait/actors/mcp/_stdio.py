"""The stdio transport: an MCP server as a child process speaking JSON-RPC lines on its pipes.

The SDK's ``stdio_client`` hides the process; plait needs it, to say *how* a server died
("exited with code 3: <its last stderr lines>") and to prove none is left running. So this
module spawns the child itself (in its own process group), gives a ``ClientSession`` its pipes
as the read and write streams the SDK's transports provide (a line a message, read and written
by the session's own tasks, with no bridging task), keeps the tail of its stderr, and on exit
follows the MCP shutdown sequence: close stdin, wait, then SIGTERM and SIGKILL the group.
Imports ``mcp``: loaded only by ``_client.py``, itself loaded only when a server starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Final, Self

import anyio
import anyio.abc
import mcp_types
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from plait._errors import McpError
from plait.actors._text import mended_json

__all__ = ["ChildProcess", "stdio_transport"]

STDERR_TAIL: Final = 2048
"""Bytes of a server's stderr kept for error messages."""
EXIT_GRACE_SEC: Final = 2.0
"""How long a server may take to exit once its stdin is closed, before it is signalled."""
KILL_GRACE_SEC: Final = 2.0
"""How long after SIGTERM before SIGKILL."""
_POLL_SEC: Final = 0.01
_GONE: Final = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)
"""How a pipe says the child is gone."""

Streams = tuple["_LineReader", "_LineWriter"]


class ChildProcess:
    """What the connection may know of its server's process."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self._process = process
        self._tail = bytearray()
        self.exit_grace_sec = EXIT_GRACE_SEC
        """How long it is given to exit once its stdin is closed, before it is signalled (none
        when closed as it starts: it has nothing of ours to shut down, and reads its stdin
        only once started, seconds later under load)."""

    @property
    def pid(self) -> int:
        """The child's pid, which is also its process group id."""
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status once reaped; negative for a signal, as in ``subprocess``."""
        return self._process.returncode

    def stderr_tail(self) -> str:
        """The last lines it wrote to stderr (up to ``STDERR_TAIL`` bytes), stripped."""
        tail = bytes(self._tail)
        if len(tail) >= STDERR_TAIL and b"\n" in tail:
            tail = tail.split(b"\n", 1)[1]  # drop the partial first line
        return tail.decode(errors="replace").strip()

    def exit_description(self) -> str:
        """Say how it ended: ``exited with code 3: <stderr tail>`` or ``was killed by signal 9``."""
        code = self.returncode
        if code is None:
            what = "closed its output"
        elif code < 0:
            what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
        tail = self.stderr_tail()
        return f"{what}: {tail}" if tail else what

    def keep(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > STDERR_TAIL:
            del self._tail[: len(self._tail) - STDERR_TAIL]


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    on_eof: Callable[[], None],
) -> AsyncIterator[tuple[Streams, ChildProcess]]:
    """Spawn the server and yield the session's streams and the child; stop it on exit.

    ``on_eof`` is called (on the loop) when the server closes its stdout or a write to its
    stdin fails: it has died, or is about to. Raises ``McpError`` if the command cannot be
    started.
    """
    process = await _spawn(command, args, env, cwd)
    child = ChildProcess(process)
    assert process.stdin is not None and process.stdout is not None
    read_stream = _LineReader(process.stdout, on_eof)
    write_stream = _LineWriter(process.stdin, on_eof)

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                child.keep(chunk)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stderr)
        try:
            yield (read_stream, write_stream), child
        finally:
            # Stopping must finish even if the caller is cancelled, or a server would leak;
            # every wait inside is bounded.
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await read_stream.aclose()
                await _stop(process, child.exit_grace_sec)
            tasks.cancel_scope.cancel()


class _LineReader:
    """The session's read stream: the server's stdout, one JSON-RPC message a line.

    The session's own receive loop reads the pipe through it, so an answer reaches the
    caller with no task of ours in between (the SDK's ``stdio_client`` bridges the pipe to a
    memory stream in a task of its own: one more hand-over each way).
    """

    def __init__(self, stdout: anyio.abc.ByteReceiveStream, on_eof: Callable[[], None]) -> None:
        self._stdout = stdout
        self._on_eof = on_eof
        self._partial = bytearray()
        self._lines: deque[bytearray] = deque()
        self._ended = False
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        """Return the next message (or the error parsing a line); ``EndOfStream`` at EOF."""
        while not self._lines:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._ended:
                raise anyio.EndOfStream
            try:
                chunk = await self._stdout.receive()
            except (anyio.EndOfStream, *_GONE):
                self._end()
                continue
            self._partial += chunk
            if b"\n" in chunk:
                *lines, rest = self._partial.split(b"\n")
                self._partial = bytearray(rest)
                self._lines.extend(line for line in lines if line.strip())
        return _parse(self._lines.popleft())

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._on_eof()

    def __aiter__(self) -> _LineReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Read no more (the session is ending): the child is stopped next."""
        self._closed = True
        self._end()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _LineWriter:
    """The session's write stream: each message written to the server's stdin at once, by
    the task that sends it (whole lines, so concurrent senders never interleave)."""

    def __init__(self, stdin: anyio.abc.ByteSendStream, on_eof: Callable[[], None]) -> None:
        self._stdin = stdin
        self._on_eof = on_eof
        self._closed = False

    async def send(self, message: SessionMessage, /) -> None:
        """Write ``message`` as one line; ``BrokenResourceError`` if the pipe is gone."""
        if self._closed:
            raise anyio.ClosedResourceError
        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            await self._stdin.send(data.encode() + b"\n")
        except _GONE as exc:
            self._on_eof()  # a dead pipe ends the connection: requests fail, it restarts
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        """Send no more (stdin itself is closed when the child is stopped)."""
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _spawn(
    command: str, args: Sequence[str], env: Mapping[str, str], cwd: str | None
) -> anyio.abc.Process:
    if cwd is not None and not os.path.isdir(cwd):
        raise McpError(f"working directory not found: {cwd}")
    try:
        return await anyio.open_process(
            [command, *args],
            env=get_default_environment() | dict(env),
            cwd=cwd,
            start_new_session=True,  # its own process group, so the whole tree can be stopped
        )
    except FileNotFoundError:
        raise McpError(f"command not found: {command}") from None
    except PermissionError:
        raise McpError(f"command not executable: {command}") from None
    except OSError as exc:
        raise McpError(f"cannot start {command}: {exc.strerror or exc}") from None


def _parse(line: bytes | bytearray) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        # Undecodable bytes or a lone surrogate's escape in its text: read as U+FFFD, and so
        # recorded (docs/event-log.md#text), rather than leave its caller waiting for an answer.
        mended = mended_json(bytes(line))
        if mended != line:
            return _parse(mended)
        # One bad line does not end the connection; a call it names ends at once.
        return _failed_answer(bytes(line), exc) or exc


_ID: Final = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_BODY: Final = re.compile(rb'"(result|error|method)"\s*:')


def _failed_answer(line: bytes, error: ValueError) -> SessionMessage | None:
    """An error answer to the request whose answer ``line`` (not JSON-RPC) means to be, if it
    names one before its result: the call fails at once, as over streamable HTTP, rather than
    wait for its timeout. A request of the server's (a ``method``) is none of ours."""
    body = _BODY.search(line)
    if body is not None and body.group(1) == b"method":
        return None
    found = _ID.search(line, 0, len(line) if body is None else body.start())
    if found is None:
        return None
    try:
        request_id = json.loads(found.group(1))
    except ValueError:  # an id string with a bad escape: it names nothing
        return None
    failed = mcp_types.ErrorData(code=mcp_types.PARSE_ERROR, message=f"Failed to parse {error}")
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=failed))


async def _stop(process: anyio.abc.Process, grace_sec: float) -> None:
    """Close stdin, give the server ``grace_sec`` to exit, then stop its whole process group."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    await _wait_exit(process, grace_sec)
    if _group_alive(process.pid):
        # The leader is still up, or it left children behind in its group: stop them all.
        await terminate_posix_process_tree(process, KILL_GRACE_SEC)
        await _wait_exit(process, KILL_GRACE_SEC)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()


async def _wait_exit(process: anyio.abc.Process, timeout: float) -> bool:
    """Poll the exit status (``wait()`` would also wait for pipes a grandchild may hold)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(_POLL_SEC)
    return process.returncode is not None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # zombies or foreign members: cannot prove it is gone
    return True
