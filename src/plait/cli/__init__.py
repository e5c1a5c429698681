# The command line: the `plait` command, built on the embedding API. It imports `plait.runtime`,
# `plait.replay`, `plait.actors` and `plait.events`; nothing in the package imports it.
"""The ``plait`` command.

Results go to stdout, progress and errors to stderr (``plait.cli.output`` says how each is
printed). Every command reads the configuration: ``plait.toml``, ``mcp.json``, the
environment, then the flags (``plait.config``). An error a user can cause is one line,
``plait: ...``, and exit code 1; a traceback only with ``--debug``. Heavy imports (openai,
mcp) happen inside the commands that need them.

    parser.py        every command and flag, and ``main``
    common.py        the configuration, the store, a session by prefix, the runtime
    run_commands.py  exec, chat, compact, recover, demo, mcp-server: the commands that run tasks
    log_commands.py  sessions, history, log, audit, replay, fork...: the ones that read the log
    output.py        what they print; live.py and chat.py, what a person watching sees
    mcp_server.py    plait as an MCP server, and mcp_live.py what it tells the client
    demo.py          the offline demo, and demo_tools.py its MCP server
"""

from plait.cli.parser import main

__all__ = ["main"]
