"""Where the project is: ``plait.toml``, the ``mcp.json`` files, the store and the custom
commands, found by walking up from the working directory as git finds ``.git``.

The walk goes from the working directory up to the repository's root (the nearest directory
holding ``.git``), or to the filesystem's root outside a repository; for each thing looked
for, the nearest directory that has it wins. A new store is made where the project is: beside
``plait.toml``, else at the repository's root, else in the working directory
(docs/configuration.md#where-plait-looks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONFIG_FILE", "MCP_JSON", "STORE", "Project", "find_project", "walk"]

CONFIG_FILE = "plait.toml"
"""The project's configuration file."""
MCP_JSON = (".mcp.json", "mcp.json")
"""The ``mcp.json`` files read when ``mcp_json`` is not set (both, where both are)."""
STORE = Path(".plait", "plait.db")
"""The store when none is configured: a SQLite file under the project's directory."""
COMMANDS = Path(".plait", "commands")
"""The project's custom chat commands."""


@dataclass(frozen=True)
class Project:
    """What the walk up from ``cwd`` found."""

    cwd: Path
    """The working directory, absolute."""
    repo: Path | None
    """The repository's root: the nearest directory with ``.git``; ``None`` outside one."""
    config: Path | None
    """The nearest ``plait.toml``."""
    mcp_json: tuple[Path, ...]
    """The ``.mcp.json`` and ``mcp.json`` of the nearest directory that has either."""
    commands: Path | None
    """The nearest ``.plait/commands`` directory."""
    store: Path
    """The nearest ``.plait/plait.db`` up to the project's directory, else where a new one
    goes: ``.plait/plait.db`` in the project's directory."""

    @property
    def home(self) -> Path:
        """The project's directory: the one holding ``plait.toml``, else the repository's
        root, else the working directory."""
        return self.config.parent if self.config else self.repo or self.cwd


def walk(cwd: str | Path = ".") -> list[Path]:
    """Return the directories looked in, nearest first: ``cwd`` and those above it, up to
    the repository's root (included) or the filesystem's."""
    start = Path(cwd).resolve()
    found = []
    for folder in (start, *start.parents):
        found.append(folder)
        if (folder / ".git").exists():
            break
    return found


def find_project(cwd: str | Path = ".") -> Project:
    """Walk up from ``cwd`` and say what was found where."""
    folders = walk(cwd)
    repo = folders[-1] if (folders[-1] / ".git").exists() else None
    config = _nearest(folders, lambda d: [d / CONFIG_FILE] if (d / CONFIG_FILE).is_file() else [])
    jsons = _nearest(folders, lambda d: [d / n for n in MCP_JSON if (d / n).is_file()])
    commands = _nearest(folders, lambda d: [d / COMMANDS] if (d / COMMANDS).is_dir() else [])
    # A store above the project's plait.toml is another project's.
    top = folders.index(config[0].parent) + 1 if config else len(folders)
    store = _nearest(folders[:top], lambda d: [d / STORE] if (d / STORE).is_file() else [])
    home = config[0].parent if config else repo or folders[0]
    return Project(
        cwd=folders[0],
        repo=repo,
        config=config[0] if config else None,
        mcp_json=tuple(jsons),
        commands=commands[0] if commands else None,
        store=store[0] if store else home / STORE,
    )


def _nearest(folders: list[Path], found_in: Callable[[Path], list[Path]]) -> list[Path]:
    """What ``found_in`` finds in the nearest folder where it finds anything."""
    for folder in folders:
        if paths := found_in(folder):
            return paths
    return []
