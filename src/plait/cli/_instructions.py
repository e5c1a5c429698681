"""The instructions every new session of the command line starts with, whichever face starts
it (``plait exec``, ``plait chat``, ``plait mcp-server``'s ``run``): the working directory,
then the project's rules, the ``AGENTS.md`` files, as Codex reads them
(docs/configuration.md#what-a-new-session-is-told).

They are the root conversation's user instructions, so the log holds them: a replay needs
none of the files, and a resumed session keeps those it started with.
"""

from __future__ import annotations

import os
from pathlib import Path

from plait._project import repository, usable, walk

__all__ = ["MAX_RULES_BYTES", "RULES_FILE", "session_instructions", "user_dir"]

RULES_FILE = "AGENTS.md"
"""The file that holds a project's rules for agents."""
MAX_RULES_BYTES = 32 * 1024
"""The most of the ``AGENTS.md`` files the instructions carry."""


def user_dir() -> Path:
    """plait's directory in the user's configuration (``$XDG_CONFIG_HOME/plait``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "plait"


def session_instructions(workdir: str | Path = ".") -> str:
    """The user instructions of a new session run from ``workdir``: the working directory,
    then the ``AGENTS.md`` files, the user's own first, then those from the repository's root
    down to ``workdir`` (outside a repository, ``workdir``'s alone), at most
    ``MAX_RULES_BYTES`` of them. A project's ``AGENTS.md`` that belongs to another user is
    left out (``plait._project.usable``)."""
    folders = walk(workdir)
    if repository(folders) is None:
        folders = folders[:1]
    parts = [f"The working directory is {folders[0]}."]
    files = [user_dir() / RULES_FILE]
    files += [d / RULES_FILE for d in reversed(folders) if usable(d / RULES_FILE, d)]
    budget = MAX_RULES_BYTES
    for path in files:
        if budget <= 0 or not path.is_file():
            continue
        rules = path.read_bytes()[:budget].decode("utf-8", errors="replace").strip()
        budget -= len(rules.encode())
        if rules:
            parts.append(f"Rules from {path}:\n\n{rules}")
    return "\n\n".join(parts)
