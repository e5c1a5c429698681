"""What a person meets on a first run of ``plait``: its version, and a store that needs a part
not installed, each said on one line."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import Cli

WITHOUT_PSYCOPG = (
    "import sys; sys.modules['psycopg'] = None; from plait.cli import main; sys.exit(main())"
)
"""``plait`` in a Python where ``import psycopg`` fails as it does when it is not installed
(``None`` in ``sys.modules`` makes the import raise ``ModuleNotFoundError``)."""


def test_version_prints_the_installed_package_version(cli: Cli) -> None:
    done = cli("--version")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"plait {version('plait')}\n"


def test_a_postgresql_store_without_the_postgres_extra_is_one_line_naming_the_install(
    cli: Cli,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, "--store", "postgresql://db/plait", "sessions"],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "plait: a PostgreSQL store needs psycopg, which is not installed: "
        "pip install 'plait[postgres]'\n"
    )


def test_a_psycopg_that_cannot_load_is_one_line_saying_why(cli: Cli) -> None:
    # psycopg installed, but told to use an implementation that is not (as when no libpq it
    # can use is found): the real ImportError psycopg raises, not ModuleNotFoundError.
    done = cli("--store", "postgresql://db/plait", "sessions", env={"PSYCOPG_IMPL": "c"})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "plait: a PostgreSQL store needs psycopg, which cannot be loaded (couldn't import "
        "requested psycopg 'c' implementation: No module named 'psycopg_c'): "
        "pip install 'plait[postgres]'\n"
    )
