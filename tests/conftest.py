"""Fixtures shared by every wing's tests."""

from __future__ import annotations

import compileall
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pg_server
import pytest
import support
from scripted import HttpServer
from support import BACKENDS, StoreFactory

import plait
from plait.events import EventStore
from plait.testing import ScriptedModelServer

# Every test process rewrites and compiles each test module as it collects the whole suite
# (~2.7 s CPU of ~5): with PYTHONDONTWRITEBYTECODE set, pytest kept none of it for the next
# run, or for the other workers. Let it (tests/**/__pycache__, which git ignores).
sys.dont_write_bytecode = False

_POSTGRES = pytest.StashKey[tuple[pg_server.OwnServer | None, str, pytest.MonkeyPatch]]()


def pytest_configure(config: pytest.Config) -> None:
    """Choose the run's PostgreSQL server once, in the run's first process (tests/pg_server.py):
    xdist starts its workers after this, with the URL in their environment. Compile plait's
    modules there too, before any test starts a ``plait`` process."""
    if hasattr(config, "workerinput"):
        return
    # With PYTHONDONTWRITEBYTECODE (set in many container images) no process writes the
    # bytecode of an editable install's modules, so every `plait` process the run starts
    # compiled ~200 of them again: ~60 ms CPU of `plait log`'s ~150. Once here
    # costs ~0.2 s; a file already compiled is skipped, and Python checks each against its
    # source's mtime and size when it loads it. (An install the run cannot write to was
    # compiled by pip.)
    with contextlib.suppress(OSError):
        compileall.compile_dir(os.path.dirname(plait.__file__), quiet=2)
    try:
        url, own, header = pg_server.choose()
    except pg_server.Unusable as exc:
        raise pytest.UsageError(str(exc)) from None
    patch = pytest.MonkeyPatch()
    patch.setenv("PLAIT_TEST_POSTGRES", url)
    patch.setattr(support, "POSTGRES_URL", url)  # imported by this file, before the choice
    if own is not None:
        patch.setenv(pg_server.DATA_VARIABLE, str(own.data))
    config.stash[_POSTGRES] = (own, header, patch)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _POSTGRES in config.stash:
        own, _, patch = config.stash[_POSTGRES]
        patch.undo()
        if own is not None:
            own.stop()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [config.stash[_POSTGRES][1]] if _POSTGRES in config.stash else []


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Run more test processes than there are cores for ``-n auto`` (pyproject.toml's addopts):
    most tests wait, on the ``plait`` processes and servers they start and on their timers, so
    a worker per core left 2 cores idle a third of the time. Twice the cores, up to four more
    than them: on a large machine, twice as many would open more PostgreSQL connections than a
    server's default 100 allows."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(2 * (cores or 1), (cores or 1) + 4)


@pytest.fixture(scope="session", autouse=True)
def no_project_above(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fail at once if a directory above the tests' own holds a plait project: ``plait`` looks
    for its files up to the filesystem root outside a repository (docs/configuration.md), so
    each test would use that project's store and configuration instead of its own."""
    base = tmp_path_factory.getbasetemp()
    found = [
        parent / name
        for parent in base.parents
        for name in (".plait", "plait.toml", ".mcp.json", "mcp.json", "AGENTS.md", ".git")
        if (parent / name).exists()
    ]
    assert not found, f"the tests' directories are inside a project: remove {found}"


@pytest.fixture(scope="session", autouse=True)
def no_user_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point ``XDG_CONFIG_HOME`` at an empty directory for the whole run: a test, and every
    ``plait`` it starts with the test's environment, reads no ``config.toml``, ``AGENTS.md``
    or ``commands/`` of the machine's user (docs/configuration.md#where-plait-looks)."""
    empty = tmp_path_factory.mktemp("user-config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(empty))
        for name in [name for name in os.environ if name.startswith("OTEL_")]:
            patch.delenv(name)  # a machine's collector gets none of the tests' sessions
        yield empty


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_as_a_shell_gives_it() -> Iterator[None]:
    """Start the tests' processes with SIGINT's default action, as a user's shell starts a
    command. A test run that a script started in the background ignores SIGINT (POSIX: so does
    every job a shell without job control starts), hands that down to each process it starts,
    and ``plait`` keeps an ignored SIGINT ignored (docs/processes.md#stopping): the tests that
    send one would see it do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(params=["sqlite", "postgres"])
def durable_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of each durable backend."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close()


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of each backend, cleaned up after the test."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close()


@pytest.fixture(params=["memory", "sqlite"])
def dense_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory of stores of each backend whose positions are dense (not PostgreSQL's:
    docs/event-log.md#streams-seq-and-position), cleaned up after the test."""
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def store(stores: StoreFactory) -> EventStore:
    """An empty store of each backend."""
    return stores.open()


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    """A scripted model server; tests push the steps they need."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    """The URL of the test MCP server (tests/mcp/server.py) over streamable HTTP, one process
    for the module's tests, for those whose proof holds over any transport and that leave the
    server as they found it (no ``grow``, no ``crash``): a server of their own each, over
    stdio, costs ~0.6 s CPU a start, mostly importing ``mcp``."""
    server = HttpServer()
    yield server.url
    server.close()


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with one commit (for ``mcp-server-git``)."""
    path = tmp_path_factory.mktemp("repo")
    (path / "README").write_text("hello\n")
    git = ["git", "-C", str(path), "-c", "user.name=plait", "-c", "user.email=plait@example.com"]
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "README"],
        ["commit", "-qm", "first commit"],
    ):
        subprocess.run([*git, *args], check=True)
    return path
