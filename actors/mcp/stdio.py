"""The stdio transport: an MCP server as a child process speaking JSON-RPC lines on its pipes.

The SDK's ``stdio_client`` hides the process; plait needs it, to say *how* a server died
("exited with code 3: <its last stderr lines>") and to prove none is left running. So this
module spawns the child itself (in its own process group), bridges its pipes to the memory
streams a ``ClientSession`` reads and writes, keeps the tail of its stderr, and on exit
follows the MCP shutdown sequence: close stdin, wait, then SIGTERM and SIGKILL the group.
Imports ``mcp``: loaded only by ``client.py``, itself loaded only when a server starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Final

import anyio
import anyio.abc
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from plait.errors import McpError

__all__ = ["ChildProcess", "stdio_transport"]

STDERR_TAIL: Final = 2048
"""Bytes of a server's stderr kept for error messages."""
EXIT_GRACE_SEC: Final = 2.0
"""How long a server may take to exit once its stdin is closed, before it is signalled."""
KILL_GRACE_SEC: Final = 2.0
"""How long after SIGTERM before SIGKILL."""
_POLL_SEC: Final = 0.01

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception],
    MemoryObjectSendStream[SessionMessage],
]


class ChildProcess:
    """What the connection may know of its server's process."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self._process = process
        self._tail = bytearray()

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

    def _keep(self, chunk: bytes) -> None:
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

    ``on_eof`` is called (on the loop) when the server closes its stdout: it has died, or is
    about to. Raises ``McpError`` if the command cannot be started.
    """
    process = await _spawn(command, args, env, cwd)
    child = ChildProcess(process)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read_stdout() -> None:
        assert process.stdout is not None
        try:
            async with to_session:
                pending = bytearray()
                async for chunk in process.stdout:
                    start = len(pending)
                    pending += chunk
                    while (end := pending.find(b"\n", start)) >= 0:
                        line = bytes(pending[:end])
                        del pending[: end + 1]
                        start = 0
                        if line.strip():
                            await to_session.send(_parse(line))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the session is gone, or the pipe broke: either way it sees the end
        finally:
            on_eof()

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # a request must not wait forever on a dead pipe

    async def read_stderr() -> None:
        assert process.stderr is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                child._keep(chunk)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(write_stdin)
        tasks.start_soon(read_stderr)
        try:
            yield (read_stream, write_stream), child
        finally:
            # Stopping must finish even if the caller is cancelled, or a server would leak;
            # every wait inside is bounded.
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await read_stream.aclose()
                await _stop(process)
            tasks.cancel_scope.cancel()


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


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc  # the session surfaces it; one bad line does not end the connection


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, give the server time to exit, then stop its whole process group."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    await _wait_exit(process, EXIT_GRACE_SEC)
    if _group_alive(process.pid):
        # The leader is still up, or it left children behind in its group: stop them all.
        await terminate_posix_process_tree(process, KILL_GRACE_SEC)
        await _wait_exit(process, KILL_GRACE_SEC)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()
    # anyio keeps the asyncio transport open while a pipe end lives; close it, or it warns.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        close()


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
