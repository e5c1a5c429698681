"""plait's configuration: files, ``mcp.json``, the environment, flags, then ``-c``.

Where it comes from, in order, each overriding the one before: the defaults below; the user's
file (``$XDG_CONFIG_HOME/plait/config.toml``, else ``~/.config/plait/config.toml``); the
project's (``--config PATH``, else ``PLAIT_CONFIG``, else ``plait.toml`` in the working
directory, if there is one), merged table by table; the ``mcp.json`` files named by
``mcp_json`` (else ``.mcp.json`` and ``mcp.json`` in the working directory), each server
whole; the environment (``OPENAI_BASE_URL``, the key in ``model.api_key_env``,
``PLAIT_MODEL``, ``PLAIT_STORE``); what the caller passes (the command line's flags); last the
``-c KEY.PATH=VALUE`` overrides. Every value is checked by msgspec: an unknown key, a wrong
type or a missing field is one ``ConfigError`` naming the file (or the ``-c``), the key and
what was expected.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from plait.errors import ConfigError

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

CONFIG_FILE = "plait.toml"
"""The file looked for in the working directory."""
USER_CONFIG = Path("plait", "config.toml")
"""The user's own file, under the XDG configuration directory (``~/.config``)."""
_DISCOVERED = (".mcp.json", "mcp.json")
"""The ``mcp.json`` files read from the working directory when ``mcp_json`` is not set."""
DEFAULT_STORE = ".plait/plait.db"
"""The store when none is configured: a SQLite file under the working directory."""

# Numbers with a range: a value outside it is refused when the file is read, key named.
_Positive = Annotated[float, Meta(gt=0)]
_AtLeastOne = Annotated[int, Meta(ge=1)]


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[model]``: the OpenAI-compatible server."""

    base_url: str | None = None
    """The server's base URL (``.../v1``; ``OPENAI_BASE_URL`` overrides it); ``None``:
    OpenAI's."""
    model: str = "gpt-4o-mini"
    """The model name sent with each request (``PLAIT_MODEL`` overrides it)."""
    api_key_env: str = "OPENAI_API_KEY"
    """The environment variable holding the API key (keys never go in the file)."""
    context_window: _AtLeastOne | None = None
    """The model's context window in tokens, when known."""
    timeout_sec: _Positive = 60.0
    """Seconds to connect, and the longest silence inside a stream."""
    max_attempts: _AtLeastOne = 3
    """Requests sent at most for one completion."""
    max_reply_bytes: _AtLeastOne = 8 << 20
    """Most bytes of a reply kept (text, reasoning, call arguments); past them plait stops
    reading it and its task ends ``truncated``."""
    max_reply_sec: _Positive = 600.0
    """Most seconds a reply may stream; then it is cut the same way."""
    max_output_tokens: _AtLeastOne | None = None
    """Most tokens a reply may have; a reply cut there ends its task ``truncated``."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field the cap goes in (OpenAI's reasoning models take only the second)."""
    temperature: Annotated[float, Meta(ge=0)] | None = None
    """Sampling temperature (unset: the server's default)."""
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    """Nucleus sampling mass."""
    seed: int | None = None
    """Sampling seed, for servers that honour it."""
    stop: list[str] | None = None
    """Sequences that end a reply."""
    reasoning_effort: str | None = None
    """``low``, ``medium``, ``high``... for reasoning models."""
    parallel_tool_calls: bool | None = None
    """Whether the model may make several tool calls in one reply."""
    extra_body: dict[str, Any] = {}
    """More request fields, sent as given (a table: a server's own parameters)."""
    headers: dict[str, str] = {}
    """Extra HTTP headers for each request (keys stay out of files: a header that carries
    one belongs in a proxy's configuration, not here)."""
    send_reasoning: bool = False
    """Send a reply's reasoning back on assistant messages with tool calls, as
    ``reasoning_content`` (DeepSeek's thinking mode requires it; OpenAI refuses it)."""


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[store]``: where the event log lives."""

    url: str = DEFAULT_STORE
    """A SQLite path (relative to the working directory), ``memory:`` or ``postgresql://...``."""
    busy_timeout_sec: Annotated[float, Meta(ge=0)] = 5.0
    """Seconds to wait for another process's write lock on a SQLite store before giving up."""


class PolicyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[policy]``: limits that hold for every session."""

    approval: Literal["never", "on-request", "on-write", "untrusted"] = "never"
    """Which MCP tool calls wait for a decision: ``never``; ``on-request``, those of tools
    that may be destructive; ``on-write``, of every tool that is not read-only;
    ``untrusted``, every call. ``plait chat`` asks at the terminal; ``plait exec`` has nobody
    to ask, so such calls are denied."""
    approval_timeout_sec: _Positive = 300.0
    """Seconds a call waits for its decision before it is denied."""
    max_interrupt_chain_depth: Annotated[int, Meta(ge=0)] = 8
    """Nested ``conv_create``/``conv_send`` allowed before the tool answers with an error."""
    max_concurrent_tool_calls: _AtLeastOne = 8
    """MCP calls in flight at once in a session; more wait, in order."""
    max_concurrent_tool_calls_per_conversation: _AtLeastOne = 4
    """MCP calls in flight at once in one conversation, under the session's cap."""
    storage: str = "full"
    """New sessions' storage policy: ``full``, ``headers_only``, ``none`` or ``ttl:SECONDS``
    (``ttl:7d``; see ``StoragePolicy.parse``)."""


class HistoryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[history]``: compaction and history bounds (``model.context_window`` enables automatic
    compaction)."""

    compact_threshold: Annotated[float, Meta(gt=0, le=1)] = 0.9
    """Compact before a turn whose prompt would pass this fraction of the context window."""
    keep_recent_tokens: Annotated[int, Meta(ge=0)] = 2048
    """About how many tokens of the latest history a compaction keeps as they are."""
    max_items: _AtLeastOne | None = None
    """Most messages a conversation's history keeps; the oldest go first."""
    max_tokens: _AtLeastOne | None = None
    """Most approximate tokens a conversation's history keeps; the oldest go first."""


class Config(msgspec.Struct, frozen=True):
    """Everything configurable, after files, environment and overrides were applied."""

    model: ModelConfig = ModelConfig()
    """The model server."""
    store: StoreConfig = StoreConfig()
    """The event log."""
    policy: PolicyConfig = PolicyConfig()
    """Session-wide limits."""
    history: HistoryConfig = HistoryConfig()
    """Compaction and history bounds."""
    mcp_servers: dict[str, Any] = {}
    """MCP servers by name (``McpServerConfig`` values)."""
    api_key: str | None = None
    """The API key read from ``model.api_key_env``; ``None`` when unset."""
    source: str = "defaults"
    """The files the configuration was read from, for messages."""


class _File(msgspec.Struct, forbid_unknown_fields=True):
    model: ModelConfig = ModelConfig()
    store: StoreConfig = StoreConfig()
    policy: PolicyConfig = PolicyConfig()
    history: HistoryConfig = HistoryConfig()
    mcp_servers: dict[str, dict[str, Any]] = {}
    mcp_json: list[str] | None = None


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
) -> Config:
    """Read the configuration for a run in ``cwd``; ``model``/``store`` are the flags' values,
    ``model_flags`` those of other ``[model]`` keys, by name, and ``overrides`` the
    ``KEY.PATH=VALUE`` texts of ``-c``, applied last.

    Raises ``ConfigError`` naming the file and the key when anything is wrong.
    """
    env = os.environ if env is None else env
    root = Path(cwd)
    named = path if path is not None else env.get("PLAIT_CONFIG") or None
    file = Path(named) if named is not None else root / CONFIG_FILE
    if named is not None and not file.is_absolute():
        file = root / file
    layers: list[tuple[str, dict[str, Any]]] = []
    user = user_config_file(env)
    if user is not None and user.is_file():
        layers.append((str(user), _load(user, tomllib.loads, "TOML")))
    if named is not None or file.exists():
        layers.append((str(file), _load(file, tomllib.loads, "TOML")))
    files = len(layers)
    layers += [(f"-c {text}", _override(text)) for text in overrides]
    merged: dict[str, Any] = {}
    for source, data in layers:
        _check_layer(data, source)
        _merge(merged, data)
    parsed = _convert(merged, _File, ", ".join(source for source, _ in layers))
    # Servers: the files', then each mcp.json's (a whole entry each), then -c's keys on top.
    tables, origin = _server_tables(layers[:files])
    sources = [source for source, _ in layers[:files]]
    if parsed.mcp_json is None:  # not set: those of the working directory, if any
        json_paths = [root / name for name in _DISCOVERED if (root / name).is_file()]
    else:
        json_paths = [root / name for name in parsed.mcp_json]
    for json_path in json_paths:
        key, entries = _read_mcp_json(json_path, env, root)
        tables.update(entries)
        origin.update(dict.fromkeys(entries, (str(json_path), key)))
        sources.append(str(json_path))
    for source, data in layers[files:]:
        for name, table in data.get("mcp_servers", {}).items():
            _merge(tables.setdefault(name, {}), table)
            origin[name] = (source, "mcp_servers")
    servers = {name: _server(name, table, *origin[name]) for name, table in tables.items()}
    sources += [source for source, _ in layers[files:]]
    pinned = {key for _, data in layers[files:] for key in _paths(data)}
    changes: dict[str, Any] = {}
    if env.get("OPENAI_BASE_URL"):
        changes["base_url"] = env["OPENAI_BASE_URL"]
    if model or env.get("PLAIT_MODEL"):
        changes["model"] = model or env["PLAIT_MODEL"]
    changes.update(model_flags or {})
    changes = {k: v for k, v in changes.items() if f"model.{k}" not in pinned}  # -c wins
    url = parsed.store.url
    if "store.url" not in pinned:
        url = store or env.get("PLAIT_STORE") or url
    if "://" not in url and url != "memory:" and not Path(url).is_absolute():
        url = str(root / url)
    settings = parsed.model
    return Config(
        model=msgspec.structs.replace(settings, **changes),
        store=msgspec.structs.replace(parsed.store, url=url),
        policy=parsed.policy,
        history=parsed.history,
        mcp_servers=servers,
        api_key=env.get(settings.api_key_env) or None,
        source=", ".join(sources) or "defaults",
    )


def _override(text: str) -> dict[str, Any]:
    """Turn ``-c``'s ``a.b=VALUE`` into ``{"a": {"b": VALUE}}``: the value as TOML, else the
    text as it is."""
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"-c {text}: expected KEY.PATH=VALUE, as in -c model.model=gpt-4o")
    try:
        value: Any = tomllib.loads(f"_ = {raw}")["_"]
    except tomllib.TOMLDecodeError:
        value = raw
    for part in reversed(parts):
        value = {part: value}
    result: dict[str, Any] = value
    return result


def _check_layer(data: dict[str, Any], source: str) -> None:
    """Check one file's (or one ``-c``'s) keys and types alone, so an error names it."""
    _convert(data, _File, source)
    storage = data.get("policy", {}).get("storage")
    if storage is not None:
        _check_storage(storage, source)
    from plait.actors.mcp.config import check_keys

    for name, table in data.get("mcp_servers", {}).items():
        check_keys(table, f"{source}: mcp_servers.{name}")


def _merge(into: dict[str, Any], data: Mapping[str, Any]) -> None:
    """Merge ``data`` into ``into``, table by table: the later value of a key wins."""
    for key, value in data.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def _paths(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Return the dotted paths of the leaves of ``data`` (``model.model``...)."""
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        paths += _paths(value, f"{path}.") if isinstance(value, Mapping) else [path]
    return paths


def _server_tables(
    layers: list[tuple[str, dict[str, Any]]],
) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]:
    """Merge the files' server tables; say which file set each server last."""
    tables: dict[str, dict[str, Any]] = {}
    origin: dict[str, tuple[str, str]] = {}
    for source, data in layers:
        for name, table in data.get("mcp_servers", {}).items():
            _merge(tables.setdefault(name, {}), table)
            origin[name] = (source, "mcp_servers")
    return tables, origin


def _load(path: Path, parse: Callable[[str], Any], kind: str) -> Any:
    """Read and parse a configuration file; what is wrong with it is one line."""
    try:
        return parse(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror or exc}") from exc
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError both are
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from exc


def _read_mcp_json(path: Path, env: Mapping[str, str], root: Path) -> tuple[str, dict[str, Any]]:
    """Return the servers of an ``mcp.json`` as Claude Code, Cursor (``mcpServers``) or VS Code
    (``servers``) write it, ``${VAR}`` references replaced, with the key they sit under."""
    data = _load(path, json.loads, "JSON")
    key = next((k for k in ("mcpServers", "servers") if isinstance(data, dict) and k in data), "")
    if not key or not isinstance(data[key], dict):
        raise ConfigError(
            f'{path}: expected an object with "mcpServers" (or VS Code\'s "servers"): '
            "{NAME: {...}}"
        )
    from plait.actors.mcp.config import expand

    entries = {}
    for name, table in data[key].items():
        where = f"{path}: {key}.{name}"
        entries[name] = expand(table, env, str(root), where) if isinstance(table, dict) else table
    return key, entries


def _server(name: str, table: Any, source: str, key: str) -> Any:
    from plait.actors.mcp.config import parse_servers

    return parse_servers({name: table}, source, key)[name]


def _check_storage(text: str, path: str) -> None:
    from plait.events.values import StoragePolicy

    try:
        StoragePolicy.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: policy.storage: {exc}") from None


def _convert(data: Any, kind: type[_File], path: str) -> _File:
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {_where(str(exc))}") from exc


# Keys people try that plait refuses on purpose: say what to do instead.
_HINTS = {
    "model.api_key": " (keys stay out of files: set the variable that model.api_key_env names)",
}


def _where(message: str) -> str:
    """Turn msgspec's ``Expected `int`, got `str` - at `$.policy.x``` into ``policy.x: ...``."""
    text, _, at = message.partition(" - at `$")
    key = at.rstrip("`").lstrip(".")
    if text.startswith("Object contains unknown field"):
        field = text.split("`")[1]
        key = f"{key}.{field}" if key else field
        hint = _HINTS.get(key, "")
        return f"{key}: unknown key{hint}"
    text = text[0].lower() + text[1:] if text else text
    return f"{key}: {text}" if key else text
