"""``McpServerConfig``: one configured MCP server, with Codex's per-server keys, validated.

``parse_servers`` turns the ``[mcp_servers]`` table of ``plait.toml`` (or the ``mcpServers``
object of an ``mcp.json``) into configs. It reads no file: the caller names the source so
that an error can say where it is (``plait.toml: mcp_servers.git: unknown key 'comand'``).
``expand`` resolves the ``${VAR}`` references of an ``mcp.json``; ``http_headers`` builds
the headers of an HTTP server from its keys and the environment, where its secrets live
(docs/tools.md#configuring-servers).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from plait._errors import ConfigError, McpError

__all__ = [
    "SERVER_NAME",
    "McpServerConfig",
    "expand",
    "http_headers",
    "locate",
    "missing_variables",
    "parse_servers",
]

SERVER_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
"""What a server name may look like: it becomes the prefix of its tools' names."""


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one MCP server and which of its tools to offer; exactly one of command/url."""

    command: str | None = None
    """The executable of a stdio server."""
    args: list[str] = []
    """Its arguments."""
    env: dict[str, str] = {}
    """Variables set for it, over a small inherited base (``HOME``, ``PATH``, ``USER``...)."""
    cwd: str | None = None
    """Its working directory; default: the runtime's."""
    url: str | None = None
    """The endpoint of a streamable-HTTP server."""
    headers: dict[str, str] = {}
    """HTTP headers sent with every request (Codex calls them ``http_headers``)."""
    enabled_tools: list[str] | None = None
    """Only these tools (the server's own names) are offered; ``None``: all of them."""
    disabled_tools: list[str] = []
    """These tools are never offered (applied after ``enabled_tools``)."""
    startup_timeout_sec: float = 10.0
    """Seconds allowed to spawn, ``initialize`` and list the tools."""
    tool_timeout_sec: float = 60.0
    """Seconds a call may take before it is cancelled and reported as a timeout."""
    read_only_tools: list[str] = []
    """Tools taken as read-only whatever their ``readOnlyHint`` says."""
    idempotent_tools: list[str] = []
    """Tools taken as idempotent (safe to run again after a crash) whatever their
    ``idempotentHint`` says."""
    enabled: bool = True
    """``False`` keeps the server configured but never started."""
    env_vars: list[str] = []
    """Variables of plait's own environment passed on to a stdio server, when set."""
    env_http_headers: dict[str, str] = {}
    """HTTP headers whose values are read from the environment: header name -> variable name."""
    bearer_token_env_var: str | None = None
    """The variable whose value is sent as ``Authorization: Bearer <value>``."""
    required: bool = False
    """``plait exec`` stops when this server cannot start (otherwise it goes on without it)."""
    scope: Literal["process", "session"] = "process"
    """``process``: one server for every session of the runtime that uses it; ``session``:
    one per session, for a server that keeps state per client (docs/tools.md#shared-servers)."""

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` (the server's own name) passes ``enabled_tools``/``disabled_tools``."""
        if self.enabled_tools is not None and tool not in self.enabled_tools:
            return False
        return tool not in self.disabled_tools


_FIELDS: Final = frozenset(McpServerConfig.__struct_fields__)
_TIMEOUTS: Final = ("startup_timeout_sec", "tool_timeout_sec")
# Keys read under another name: Codex's and the mcp.json forms' spellings.
_ALIASES: Final = {"http_headers": "headers"}
# Keys that are read, then turned into others (``_normalize``).
_EXTRA: Final = frozenset({"type", "startup_timeout_ms", *_ALIASES})
_HTTP_ONLY: Final = ("headers", "env_http_headers", "bearer_token_env_var")
_STDIO_ONLY: Final = ("args", "env", "cwd", "env_vars")
# Keys other agents know that plait refuses on purpose: say what to do instead.
_REFUSED: Final = {
    "bearer_token": "tokens stay out of files: name the variable that holds it with "
    "bearer_token_env_var",
    "scopes": "plait has no OAuth login: give a token with bearer_token_env_var",
    "oauth_resource": "plait has no OAuth login: give a token with bearer_token_env_var",
}
_TYPES: Final = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamableHttp": "http",
}


def parse_servers(
    servers: Mapping[str, object], source: str, key: str = "mcp_servers"
) -> dict[str, McpServerConfig]:
    """Validate a name → table mapping of servers; raise ``ConfigError`` naming source and key
    (``key``: where the mapping sits in its file, ``mcpServers`` in an ``mcp.json``)."""
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{source}: {key} must be a table, got {_kind(servers)}")
    return {name: _parse_one(name, table, source, key) for name, table in servers.items()}


def _parse_one(name: object, table: object, source: str, key: str) -> McpServerConfig:
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        raise ConfigError(
            f"{source}: MCP server name {name!r} is invalid: use letters, digits, '_' and '-' "
            "(it becomes the prefix of its tools' names)"
        )
    where = f"{source}: {key}.{name}"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {_kind(table)}")
    check_keys(table, where)
    for entry_key in ("env", "headers", "http_headers", "env_http_headers"):
        entries = table.get(entry_key)  # msgspec would say `env[...]`: name the entry
        for entry, value in entries.items() if isinstance(entries, Mapping) else ():
            if not isinstance(value, str):
                raise ConfigError(
                    f"{where}: key '{entry_key}.{entry}': expected a string, got {_kind(value)}"
                )
    try:
        config = msgspec.convert(_normalize(table, where), McpServerConfig)
    except msgspec.ValidationError as exc:
        # msgspec says "Expected `str`, got `int` - at `$.command`": name the key our way.
        raise ConfigError(f"{where}: {locate(str(exc))}") from None
    _check(config, table, where)
    return config


def check_keys(table: Mapping[str, object], where: str) -> None:
    """Refuse a key no server table has, naming it (``where``: ``source: key.name``)."""
    for key in table:
        if key in _REFUSED:
            raise ConfigError(f"{where}: key {key!r} is not supported: {_REFUSED[key]}")
    unknown = sorted(str(key) for key in table if key not in _FIELDS and key not in _EXTRA)
    if unknown:
        known = ", ".join(sorted(_FIELDS | {"http_headers", "startup_timeout_ms", "type"}))
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {known})")


def _normalize(table: Mapping[str, object], where: str) -> dict[str, object]:
    """Return ``table`` with the keys of other spellings turned into ours."""
    data = dict(table)
    for alias, ours in _ALIASES.items():
        if alias in data:
            if ours in data:
                raise ConfigError(f"{where}: give {alias!r} or {ours!r}, not both")
            data[ours] = data.pop(alias)
    millis = data.pop("startup_timeout_ms", None)
    if millis is not None and "startup_timeout_sec" not in data:  # as Codex: _sec wins
        if not isinstance(millis, int | float) or isinstance(millis, bool):
            raise ConfigError(f"{where}: key 'startup_timeout_ms': expected a number")
        data["startup_timeout_sec"] = millis / 1000
    kind = data.pop("type", None)
    if kind is None:
        return data
    if kind == "sse":
        raise ConfigError(
            f"{where}: type 'sse' is not supported: plait speaks stdio and streamable HTTP "
            "(most servers that serve SSE also serve streamable HTTP, often at /mcp)"
        )
    if kind not in _TYPES:
        raise ConfigError(f"{where}: key 'type': expected 'stdio' or 'http', got {kind!r}")
    needs = "command" if _TYPES[kind] == "stdio" else "url"
    if needs not in data:
        raise ConfigError(f"{where}: type {kind!r} needs {needs!r}")
    return data


def _check(config: McpServerConfig, table: Mapping[str, object], where: str) -> None:
    if (config.command is None) == (config.url is None):
        raise ConfigError(f"{where}: give exactly one of 'command' (stdio) or 'url' (HTTP)")
    if config.command is not None and not config.command.strip():
        raise ConfigError(f"{where}: 'command' is empty")
    if config.url is not None and not config.url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: 'url' must start with http:// or https://, got {config.url!r}")
    wrong = _HTTP_ONLY if config.command is not None else _STDIO_ONLY
    for key in table:
        if _ALIASES.get(key, key) in wrong:
            kind = "HTTP servers (url)" if config.command is not None else "stdio servers"
            raise ConfigError(f"{where}: key {key!r} is only for {kind}")
    for key in _TIMEOUTS:
        if getattr(config, key) <= 0:
            raise ConfigError(f"{where}: {key!r} must be positive, got {getattr(config, key)!r}")


def missing_variables(config: McpServerConfig, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return the (key, variable) pairs of the variables ``config`` reads that are unset."""
    wanted = [(f"env_http_headers.{h}", var) for h, var in config.env_http_headers.items()]
    if config.bearer_token_env_var is not None:
        wanted.append(("bearer_token_env_var", config.bearer_token_env_var))
    return [(key, var) for key, var in wanted if not env.get(var, "").strip()]


def http_headers(config: McpServerConfig, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the headers to send: ``headers``, then those read from the environment
    (default: plait's). Raises ``McpError`` naming the key and the variable, never its value."""
    env = os.environ if env is None else env
    missing = missing_variables(config, env)
    if missing:
        key, var = missing[0]
        raise McpError(f"{key} names ${var}, which is not set")
    headers = dict(config.headers)
    read = {h: (f"env_http_headers.{h}", var) for h, var in config.env_http_headers.items()}
    if config.bearer_token_env_var is not None:
        read["Authorization"] = ("bearer_token_env_var", config.bearer_token_env_var)
    for header, (key, var) in read.items():
        value = env[var].strip()
        if any(c in value for c in "\r\n\0"):
            raise McpError(f"{key}: ${var} holds a value that cannot be sent in a header")
        headers[header] = f"Bearer {value}" if key == "bearer_token_env_var" else value
    return headers


# ``${VAR}``, ``${VAR:-default}``, and VS Code's and Cursor's ``${env:VAR}``,
# ``${workspaceFolder}``, ``${userHome}``.
_REFERENCE: Final = re.compile(r"\$\{([^}]*)\}")
_EXPANDED: Final = ("command", "args", "env", "cwd", "url", "headers", "http_headers")


def expand(
    table: Mapping[str, object], env: Mapping[str, str], workspace: str, where: str
) -> dict[str, object]:
    """Return a server table of an ``mcp.json`` with its references replaced, in the keys
    that hold strings to run or send; an unset variable without a default is an error."""

    def one(text: str, key: str) -> str:
        def value(match: re.Match[str]) -> str:
            ref = match.group(1)
            name, has_default, default = ref.removeprefix("env:").partition(":-")
            if ref == "workspaceFolder":
                return workspace
            if ref == "userHome" and env.get("HOME"):
                return env["HOME"]
            if env.get(name):
                return env[name]
            if has_default:  # as a shell's: unset or empty
                return default
            if name in env:
                return ""
            raise ConfigError(f"{where}: key '{key}' needs ${{{ref}}}, which is not set")

        return _REFERENCE.sub(value, text)

    data = dict(table)
    for key in _EXPANDED:
        item = data.get(key)
        if isinstance(item, str):
            data[key] = one(item, key)
        elif isinstance(item, list):
            data[key] = [
                one(x, f"{key}[{i}]") if isinstance(x, str) else x for i, x in enumerate(item)
            ]
        elif isinstance(item, Mapping):
            data[key] = {
                k: one(v, f"{key}.{k}") if isinstance(v, str) else v for k, v in item.items()
            }
    return data


def locate(message: str) -> str:
    """Rewrite msgspec's ``... - at `$.key[1]``` as ``key 'key[1]': ...``."""
    text, sep, path = message.rpartition(" - at `$.")
    if not sep:
        return message
    return f"key {path.rstrip('`')!r}: {text}"


def _kind(value: object) -> str:
    return type(value).__name__
