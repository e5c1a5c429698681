"""Where the project is: ``plait.toml``, the ``mcp.json`` files, the store and the custom
commands, found by walking up from the working directory as git finds ``.git``.

The walk goes from the working directory up to the repository's root (the nearest directory
holding ``.git``); outside a repository, up to the user's home directory when the working
directory is under it, else to the filesystem's root. For each thing looked for, the nearest
directory that has it wins. A new store is made where the project is: beside ``plait.toml``,
else at the repository's root, else in the working directory
(docs/configuration.md#where-plait-looks).

A file or directory found on the way that belongs to another user (not the current one, not
root) is not used, and a warning says so: anyone may write in ``/tmp``, so its
``plait.toml`` or ``.mcp.json`` would otherwise run another user's commands, as git refuses a
repository another user owns (docs/configuration.md#whose-files-are-used).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CONFIG_FILE",
    "MCP_JSON",
    "STORE",
    "Project",
    "find_project",
    "foreign_owner",
    "repository",
    "usable",
    "walk",
]

log = logging.getLogger("plait._project")

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
    skipped: tuple[Path, ...] = ()
    """What the walk found but does not use: it belongs to another user."""

    @property
    def home(self) -> Path:
        """The project's directory: the one holding ``plait.toml``, else the repository's
        root, else the working directory."""
        return self.config.parent if self.config else self.repo or self.cwd


def walk(cwd: str | Path = ".") -> list[Path]:
    """Return the directories looked in, nearest first: ``cwd`` and those above it, up to
    the repository's root (included); outside one, up to the user's home directory
    (included) when ``cwd`` is under it, else to the filesystem's root."""
    start = Path(cwd).resolve()
    home = _home()
    found = []
    for folder in (start, *start.parents):
        found.append(folder)
        if folder == home or _is_repository(folder):
            break
    return found


def repository(folders: list[Path]) -> Path | None:
    """The repository's root that ends the walk ``folders``, or ``None`` outside one."""
    return folders[-1] if _is_repository(folders[-1]) else None


def find_project(cwd: str | Path = ".") -> Project:
    """Walk up from ``cwd`` and say what was found where."""
    folders = walk(cwd)
    repo = repository(folders)
    skipped: list[Path] = []

    def nearest(found_in: Callable[[Path], list[Path]], up_to: int = len(folders)) -> list[Path]:
        for folder in folders[:up_to]:
            paths = [path for path in found_in(folder) if usable(path, folder, skipped)]
            if paths:
                return paths
        return []

    config = nearest(lambda d: [d / CONFIG_FILE] if (d / CONFIG_FILE).is_file() else [])
    jsons = nearest(lambda d: [d / n for n in MCP_JSON if (d / n).is_file()])
    commands = nearest(lambda d: [d / COMMANDS] if (d / COMMANDS).is_dir() else [])
    # A store above the project's plait.toml is another project's.
    top = folders.index(config[0].parent) + 1 if config else len(folders)
    store = nearest(lambda d: [d / STORE] if (d / STORE).is_file() else [], top)
    home = config[0].parent if config else repo or folders[0]
    if not store:  # where a new one goes: not into a directory another user owns
        usable(home / STORE, home, skipped)
    return Project(
        cwd=folders[0],
        repo=repo,
        config=config[0] if config else None,
        mcp_json=tuple(jsons),
        commands=commands[0] if commands else None,
        store=store[0] if store else home / STORE,
        skipped=tuple(skipped),
    )


def foreign_owner(path: Path, folder: Path) -> int | None:
    """The user id owning ``path`` or a directory between ``folder`` and it (a link, or what
    it points to), when that user is neither the current one nor root; else ``None`` (and
    for what does not exist)."""
    mine = (os.geteuid(), 0)
    parts = path.relative_to(folder).parts
    for step in (folder.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)):
        for status in (os.lstat, os.stat):  # the link itself, then what it points to
            try:
                owner = status(step).st_uid
            except OSError:  # not there: nothing of anyone's is used
                return None
            if owner not in mine:
                return owner
    return None


_TOLD: set[Path] = set()
"""What this process warned of already: a command walks more than once."""


def usable(path: Path, folder: Path, skipped: list[Path] | None = None) -> bool:
    """Whether ``path``, found in the walk's ``folder``, may be used: not if it belongs to
    another user, which is then warned of once (and added to ``skipped``)."""
    owner = foreign_owner(path, folder)
    if owner is None:
        return True
    if skipped is not None:
        skipped.append(path)
    if path not in _TOLD:
        _TOLD.add(path)
        log.warning(
            "not using %s: it belongs to %s, not to you or root (anyone could have put it there)",
            path,
            _user(owner),
        )
    return False


def _is_repository(folder: Path) -> bool:
    """Whether ``folder`` holds a ``.git`` that is the current user's or root's."""
    return (folder / ".git").exists() and usable(folder / ".git", folder)


def _home() -> Path | None:
    """The user's home directory, resolved; ``None`` when it cannot be told."""
    try:
        return Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return None


def _user(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a user with no name."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
