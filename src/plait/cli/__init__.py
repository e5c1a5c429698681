# The command line: the `plait` command, built on the embedding API. It imports `plait.runtime`,
# `plait.replay`, `plait.actors` and `plait.events`; nothing in the package imports it.
"""The ``plait`` command.

Results go to stdout, progress and errors to stderr (``plait.cli._output`` says how each is
printed). Every command reads the configuration: ``plait.toml``, ``mcp.json``, the
environment, then the flags (``plait._config``). An error a user can cause is one line,
``plait: ...``, and exit code 1; a traceback only with ``--debug``. Heavy imports (openai,
mcp) happen inside the commands that need them, and none before ``run`` has put in the
process's signal handlers (``_lifetime.py``): importing this package costs nothing. The parser
imports none of the commands' code: ``main`` imports the module of the one it runs.

    lifetime.py      SIGTERM and SIGINT from the process's first line to its exit
    parser.py        every command and flag, and ``main``
    commands.py      what each command does (its help) and where the code that runs it is
    common.py        the configuration, the store, a session by prefix, the runtime
    run_commands.py  exec, chat, compact, recover, demo, mcp-server: the commands that run tasks
    log_commands.py  sessions, history, log, audit, replay, fork...: the ones that read the log
    output.py        what they print; live.py and chat.py, what a person watching sees
    mcp_server.py    plait as an MCP server, and mcp_live.py what it tells the client
    demo.py          the offline demo, and demo_tools.py its MCP server
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence

from plait.cli._lifetime import LIFETIME

__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``plait`` command with ``argv``; return its exit code."""
    from plait.cli._parser import main as command

    return command(argv)


def run() -> int:
    """Run the ``plait`` program (its console script, ``python -m plait``): SIGTERM and SIGINT
    are handled from this first line to the process's exit (docs/processes.md#stopping)."""
    LIFETIME.start()
    try:
        code = main()
    except KeyboardInterrupt:  # a Ctrl-C as the command ended, before it said so
        LIFETIME.end(130)
        sys.stderr.write("plait: stopped by SIGINT\n")
        code = 130
    for stream in (sys.stdout, sys.stderr):  # a signal that cuts a stuck flush exits, with code
        with contextlib.suppress(Exception):
            stream.flush()
    LIFETIME.quiet()  # the interpreter's exit: Python would put back the defaults there
    return code
