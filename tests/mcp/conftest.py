"""Fixtures for the MCP tests: the effect loop, the test server, and waiting without sleeping."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from scripted import HttpServer

from plait.actors import EffectLoop
from plait.actors.mcp import McpServerConfig
from plait.events import Body

T = TypeVar("T")

SERVER = Path(__file__).with_name("server.py")
"""The test MCP server (``python tests/mcp/server.py``)."""
BIN = Path(sys.executable).parent
"""Where the venv's console scripts (``mcp-server-time``, ``mcp-server-git``) live."""


def _stdio(*args: str, **config: Any) -> McpServerConfig:
    return McpServerConfig(command=sys.executable, args=[str(SERVER), *args], **config)


@pytest.fixture(scope="session")
def stdio() -> Callable[..., McpServerConfig]:
    """Make the config of the test server over stdio: ``stdio("--variant", "b", **keys)``."""
    return _stdio


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """Where the venv's console scripts (``mcp-server-time``, ``mcp-server-git``) live."""
    return BIN


class Loop:
    """The runtime's effect loop, driven from a test's thread as an actor would drive it."""

    def __init__(self) -> None:
        self.effects = EffectLoop()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 15.0) -> T:
        """Run ``coro`` on the loop; wait for its result at most ``timeout`` seconds."""
        return self.effects.submit(coro).result(timeout)


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    """One effect loop per test module."""
    loop = Loop()
    yield loop
    loop.effects.close()


class Reports:
    """Collects the bodies an ``McpServers`` reports (on the loop thread); waits for one."""

    def __init__(self) -> None:
        self.bodies: list[Body] = []
        self._changed = threading.Condition()

    def __call__(self, body: Body) -> None:
        with self._changed:
            self.bodies.append(body)
            self._changed.notify_all()

    def wait_for(self, match: Callable[[Body], bool], timeout: float = 15.0) -> Body:
        """Return the first report that ``match`` accepts, waiting for it if need be."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((b for b in self.bodies if match(b)), None), timeout
            )
        assert found is not None, f"no matching report in {timeout}s; got {self.bodies}"
        return found


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _children() -> set[int]:
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
        except (OSError, ValueError):
            continue  # it ended while we looked
        if int(fields.get("PPid", "0")) == os.getpid() and not fields["State"].startswith("Z"):
            found.add(int(status.parent.name))
    return found


@pytest.fixture(scope="session")
def children() -> Callable[[], set[int]]:
    """List the live child processes of this test process (Linux ``/proc``)."""
    return _children


@pytest.fixture(scope="session")
def gone() -> Callable[[int], bool]:
    """Tell whether no process (not even a zombie) has a pid."""
    return _gone


@pytest.fixture(scope="session")
def new_reports() -> Callable[[], Reports]:
    """Make a report collector (the fixture gives the class, so any scope can use it)."""
    return Reports


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    """The test server over streamable HTTP, one per module."""
    server = HttpServer()
    yield server
    server.close()


@pytest.fixture
def spawn_http() -> Iterator[Callable[[], HttpServer]]:
    """Start HTTP test servers for one test; whatever is left is stopped after it."""
    started: list[HttpServer] = []

    def spawn() -> HttpServer:
        started.append(HttpServer())
        return started[-1]

    yield spawn
    for server in started:
        if server.process.poll() is None:
            server.close()
