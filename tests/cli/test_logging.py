"""What the command line prints of log records: plait's warnings one line each, no traceback,
and nothing of other libraries' (an MCP SDK that logs a reply it could not parse with its
traceback, say); with ``-v``, everything."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from plait.events import SqliteStore

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from plait.cli import main

    main([*sys.argv[2:], "sessions", "--store", sys.argv[1]])
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("mcp.client.streamable_http").exception("Error parsing JSON response")
        logging.getLogger("plait.actors.mcp._functions").exception("function tool t failed")
        logging.getLogger("plait.runtime").info("session s resumed")
    """
)


def run(tmp_path: Path, *flags: str) -> str:
    SqliteStore(tmp_path / "plait.db").close()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "plait.db"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


def test_a_warning_is_one_line_and_other_libraries_records_are_not_printed(
    tmp_path: Path,
) -> None:
    assert run(tmp_path) == "plait: function tool t failed\n"


def test_verbose_prints_every_record_with_its_traceback(tmp_path: Path) -> None:
    printed = run(tmp_path, "-v")
    assert "plait.actors.mcp._functions: function tool t failed" in printed
    assert "plait.runtime: session s resumed" in printed
    assert "Error parsing JSON response" in printed
    assert printed.count("Traceback") == 2
