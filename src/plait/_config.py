"""plait's configuration: files, ``mcp.json``, the environment, flags, then ``-c``.

Where it comes from, in order, each overriding the one before: the defaults below; the user's
file (``$XDG_CONFIG_HOME/plait/config.toml``, else ``~/.config/plait/config.toml``); the
project's (``--config PATH``, else ``PLAIT_CONFIG``, else the nearest ``plait.toml`` of the
walk up from the working directory, ``plait._project``), merged table by table; the
``mcp.json`` files named by ``mcp_json`` (else the nearest ``.mcp.json`` and ``mcp.json``),
each server whole; the environment (``OPENAI_BASE_URL``, the key in ``model.api_key_env``,
``PLAIT_MODEL``, ``PLAIT_STORE``); what the caller passes (the command line's flags); last the
``-c KEY.PATH=VALUE`` overrides. A relative path in a file is read from the file's directory
(``store.url``, ``mcp_json``, a server's ``cwd``; in ``.vscode/mcp.json``, from the folder
holding ``.vscode``); one given on the command line or in the environment, from the working
directory. Every value is checked by msgspec: an unknown key, a wrong type or a missing field
is one ``ConfigError`` naming the file (or the ``-c``), the key and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from plait._config_read import convert, get, leaf_paths, load, merge, override
from plait._config_types import (
    DEFAULT_STORE,
    AuditConfig,
    Config,
    HistoryConfig,
    ModelConfig,
    PolicyConfig,
    StoreConfig,
    TelemetryConfig,
)
from plait._errors import ConfigError
from plait._project import CONFIG_FILE, Project, find_project

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_STORE",
    "Config",
    "ModelConfig",
    "PolicyConfig",
    "StoreConfig",
    "load_config",
    "user_config_file",
]

USER_CONFIG = Path("plait", "config.toml")
"""The user's own file, under the XDG configuration directory (``~/.config``)."""
_SERVER_KEYS = ("mcp_servers", "mcp_json")
"""The keys that configure MCP servers: a mistake in them stops only the commands that start
servers (``load_config(mcp_servers=False)``)."""

EDITOR_DIRS = (".vscode", ".cursor")
"""Directories whose ``mcp.json`` serves the folder holding them, not themselves."""

_T = TypeVar("_T")


class _File(msgspec.Struct, forbid_unknown_fields=True):
    model: ModelConfig = ModelConfig()
    store: StoreConfig = StoreConfig()
    policy: PolicyConfig = PolicyConfig()
    history: HistoryConfig = HistoryConfig()
    audit: AuditConfig = AuditConfig()
    telemetry: TelemetryConfig = TelemetryConfig()


class _Servers(msgspec.Struct):
    mcp_servers: dict[str, dict[str, Any]] = {}
    mcp_json: list[str] | None = None


@dataclass(frozen=True)
class _Layer:
    """One file's, or one ``-c``'s, keys."""

    source: str
    """The file, or ``-c TEXT``: what messages name."""
    data: dict[str, Any]
    base: Path
    """Where its relative paths are read from: the file's directory, or the working one."""
    project: bool = False
    """A project's file: its stdio servers run in its directory unless they say otherwise."""

    def part(self, servers: bool) -> dict[str, Any]:
        """Its MCP servers' keys (``servers``), or all the others."""
        return {k: v for k, v in self.data.items() if (k in _SERVER_KEYS) == servers}


def user_config_file(env: Mapping[str, str]) -> Path | None:
    """Return where the user's own configuration is: ``$XDG_CONFIG_HOME/plait/config.toml``,
    else ``$HOME/.config/plait/config.toml``; ``None`` when neither variable is set."""
    base = env.get("XDG_CONFIG_HOME") or (
        str(Path(env["HOME"]) / ".config") if env.get("HOME") else None
    )
    return Path(base) / USER_CONFIG if base else None


def load_config(
    path: str | Path | None = None,
    *,
    cwd: str | Path = ".",
    env: Mapping[str, str] | None = None,
    model: str | None = None,
    store: str | None = None,
    model_flags: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    mcp_servers: bool = True,
) -> Config:
    """Read the configuration for a run in ``cwd``; ``model``/``store`` are the flags' values,
    ``model_flags`` those of other ``[model]`` keys, by name, and ``overrides`` the
    ``KEY.PATH=VALUE`` texts of ``-c``, applied last.

    Raises ``ConfigError`` naming the file and the key when anything is wrong; with
    ``mcp_servers`` false, a mistake in the MCP servers' keys or files is kept in
    ``Config.mcp_problem`` instead, for the commands that start no server.
    """
    env = os.environ if env is None else env
    root = Path(cwd)
    project = _as_given(find_project(cwd), root)
    named = path if path is not None else env.get("PLAIT_CONFIG") or None
    file = Path(named) if named is not None else project.config
    if file is not None and not file.is_absolute():
        file = root / file
    layers: list[_Layer] = []
    user = user_config_file(env)
    if user is not None and user.is_file():
        layers.append(_Layer(str(user), load(user, tomllib.loads, "TOML"), user.parent))
    if file is not None:
        layers.append(_Layer(str(file), load(file, tomllib.loads, "TOML"), file.parent, True))
    files = len(layers)
    layers += [_Layer(f"-c {text}", override(text), root) for text in overrides]
    merged: dict[str, Any] = {}
    for layer in layers:
        _check_layer(layer.part(servers=False), layer.source)
        merge(merged, layer.part(servers=False))
    parsed = convert(merged, _File, ", ".join(layer.source for layer in layers))
    problem = None
    try:
        servers, jsons = _servers(layers, files, project, env)
    except ConfigError as exc:
        if mcp_servers:
            raise
        servers, jsons, problem = {}, [], str(exc)
    sources = [layer.source for layer in layers[:files]] + jsons
    sources += [layer.source for layer in layers[files:]]
    pinned = {key for layer in layers[files:] for key in leaf_paths(layer.data)}
    changes: dict[str, Any] = {}
    if env.get("OPENAI_BASE_URL"):
        changes["base_url"] = env["OPENAI_BASE_URL"]
    if model or env.get("PLAIT_MODEL"):
        changes["model"] = model or env["PLAIT_MODEL"]
    changes.update(model_flags or {})
    changes = {k: v for k, v in changes.items() if f"model.{k}" not in pinned}  # -c wins
    settings = parsed.model
    return Config(
        model=msgspec.structs.replace(settings, **changes),
        store=msgspec.structs.replace(
            parsed.store, url=_store_url(layers, pinned, store, env, project)
        ),
        policy=parsed.policy,
        history=parsed.history,
        audit=AuditConfig(
            _audit_path("signing_key", layers, pinned, env, root),
            _audit_path("witness", layers, pinned, env, root),
        ),
        mcp_servers=servers,
        api_key=env.get(settings.api_key_env) or None,
        source=", ".join(sources) or "defaults",
        mcp_problem=problem,
        telemetry=parsed.telemetry,
    )


def _store_url(
    layers: list[_Layer],
    pinned: set[str],
    flag: str | None,
    env: Mapping[str, str],
    project: Project,
) -> str:
    """The store: ``-c``'s, else the flag's or ``PLAIT_STORE``, else the files', else the
    project's; a relative path read from where it was given."""
    setting = [layer for layer in layers if get(layer.data, "store", "url") is not None]
    if setting and ("store.url" in pinned or not (flag or env.get("PLAIT_STORE"))):
        url, base = str(get(setting[-1].data, "store", "url")), setting[-1].base
    elif flag or env.get("PLAIT_STORE"):
        url, base = flag or env["PLAIT_STORE"], project.cwd
    elif project.store in project.skipped:
        raise ConfigError(
            f"{project.store}: not used as the store, it (or its directory) belongs to another"
            " user: name a store with --store or [store] url"
        )
    else:
        return str(project.store)
    if "://" not in url and url != "memory:" and not Path(url).is_absolute():
        url = str(base / url)
    return url


def _audit_path(
    key: str, layers: list[_Layer], pinned: set[str], env: Mapping[str, str], cwd: Path
) -> str | None:
    """The path of ``[audit] KEY`` (``signing_key``, ``witness``): ``-c``'s, else
    ``PLAIT_KEY``'s, else the files'; a relative path read from where it was given
    (docs/event-log.md#signed-heads)."""
    var = f"PLAIT_{key.upper()}"
    setting = [layer for layer in layers if get(layer.data, "audit", key) is not None]
    if setting and (f"audit.{key}" in pinned or not env.get(var)):
        path, base = str(get(setting[-1].data, "audit", key)), setting[-1].base
    elif env.get(var):
        path, base = env[var], cwd
    else:
        return None
    return path if Path(path).is_absolute() else str(base / path)


def _as_given(project: Project, cwd: Path) -> Project:
    """``project`` with what it found under the working directory named from ``cwd`` as it
    was given (``plait.toml`` for ``.``), so that messages name it as the user would; what
    is above it keeps its absolute path."""

    def named(path: Path) -> Path:
        return cwd / path.relative_to(project.cwd) if path.is_relative_to(project.cwd) else path

    return dataclasses.replace(
        project,
        cwd=cwd,
        config=project.config and named(project.config),
        mcp_json=tuple(named(path) for path in project.mcp_json),
        store=named(project.store),
        skipped=tuple(named(path) for path in project.skipped),
    )


def _servers(
    layers: list[_Layer], files: int, project: Project, env: Mapping[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """The MCP servers: the files', then each ``mcp.json``'s (a whole entry each), then
    ``-c``'s keys on top; and the ``mcp.json`` files read."""
    from plait.actors.mcp import check_keys

    parts = []
    for layer in layers:
        part = convert(layer.part(servers=True), _Servers, layer.source)
        for name, table in part.mcp_servers.items():
            check_keys(table, f"{layer.source}: mcp_servers.{name}")
        parts.append(part)
    tables: dict[str, Any] = {}
    origin: dict[str, tuple[str, str]] = {}
    runs_in: dict[str, Path | None] = {}  # a stdio server's directory when it names none
    cwd_base: dict[str, Path] = {}  # where its ``cwd`` is read from
    listed = [
        (layer, part.mcp_json)
        for layer, part in zip(layers, parts, strict=True)
        if part.mcp_json is not None
    ]
    if listed:  # the last that names them: only those, read from its directory
        layer, names = listed[-1]
        json_paths = [layer.base / name for name in names or ()]
    else:
        json_paths = list(project.mcp_json)
    entries_of: list[tuple[str, str, Path, bool, dict[str, Any]]] = [
        (layer.source, "mcp_servers", layer.base, layer.project, part.mcp_servers)
        for layer, part in zip(layers[:files], parts[:files], strict=True)
    ]
    for json_path in json_paths:
        workspace = _workspace(json_path)
        key, entries = _read_mcp_json(json_path, env, workspace)
        entries_of.append((str(json_path), key, workspace, True, entries))
    entries_of += [
        (layer.source, "mcp_servers", layer.base, False, part.mcp_servers)
        for layer, part in zip(layers[files:], parts[files:], strict=True)
    ]
    for source, key, base, in_project, entries in entries_of:
        for name, table in entries.items():
            if key == "mcp_servers":  # a file's or a -c's keys, over those before
                merge(tables.setdefault(name, {}), table)
            else:  # an mcp.json's entry, whole
                tables[name] = table
            if name not in runs_in or not source.startswith("-c "):
                runs_in[name] = base if in_project else None
            if isinstance(table, dict) and "cwd" in table:
                cwd_base[name] = base
            origin[name] = (source, key)
    servers = {}
    for name, table in tables.items():
        server = _server(name, table, *origin[name])
        if server.command is not None:
            home = runs_in.get(name)
            where = None  # where plait runs
            if server.cwd is None and home is not None and home != project.cwd:
                where = str(home)
            if server.cwd is not None:
                given = Path(server.cwd).expanduser()
                where = str(given if given.is_absolute() else cwd_base[name] / given)
            server = msgspec.structs.replace(server, cwd=where)
        servers[name] = server
    return servers, [str(path) for path in json_paths]


def _check_layer(data: dict[str, Any], source: str) -> None:
    """Check one file's (or one ``-c``'s) keys and types alone, so an error names it."""
    convert(data, _File, source)
    storage = data.get("policy", {}).get("storage")
    if storage is not None:
        _check_storage(storage, source)


def _workspace(path: Path) -> Path:
    """The folder an ``mcp.json`` serves: the one VS Code or Cursor opened for
    ``.vscode/mcp.json`` or ``.cursor/mcp.json`` (their ``${workspaceFolder}``), else the
    file's own directory (Claude Code's ``.mcp.json`` sits at the project's root)."""
    return path.parent.parent if path.parent.name in EDITOR_DIRS else path.parent


def _read_mcp_json(path: Path, env: Mapping[str, str], root: Path) -> tuple[str, dict[str, Any]]:
    """Return the servers of an ``mcp.json`` as Claude Code, Cursor (``mcpServers``) or VS Code
    (``servers``) write it, ``${VAR}`` references replaced (``${workspaceFolder}`` is
    ``root``), with the key they sit under."""
    data = load(path, json.loads, "JSON")
    key = next((k for k in ("mcpServers", "servers") if isinstance(data, dict) and k in data), "")
    if not key or not isinstance(data[key], dict):
        raise ConfigError(
            f'{path}: expected an object with "mcpServers" (or VS Code\'s "servers"): '
            "{NAME: {...}}"
        )
    from plait.actors.mcp import expand

    entries = {}
    for name, table in data[key].items():
        where = f"{path}: {key}.{name}"
        entries[name] = expand(table, env, str(root), where) if isinstance(table, dict) else table
    return key, entries


def _server(name: str, table: Any, source: str, key: str) -> Any:
    from plait.actors.mcp import parse_servers

    return parse_servers({name: table}, source, key)[name]


def _check_storage(text: str, path: str) -> None:
    from plait.events import StoragePolicy

    try:
        StoragePolicy.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: policy.storage: {exc}") from None
