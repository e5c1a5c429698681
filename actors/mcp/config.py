"""``McpServerConfig``: one configured MCP server, with Codex's per-server keys, validated.

``parse_servers`` turns the ``[mcp_servers]`` table of ``plait.toml`` (or the ``mcpServers``
object of an ``mcp.json``) into configs. It reads no file: the caller names the source so
that an error can say where it is (``plait.toml: mcp_servers.git: unknown key 'comand'``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from plait.errors import ConfigError

__all__ = ["SERVER_NAME", "McpServerConfig", "locate", "parse_servers"]

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
    """HTTP headers sent with every request (``Authorization``...)."""
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


def parse_servers(
    servers: Mapping[str, Any], source: str, key: str = "mcp_servers"
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
    unknown = sorted(str(key) for key in table if key not in _FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_FIELDS))})"
        )
    for key in ("env", "headers"):  # msgspec would say `env[...]`: name the entry
        entries = table.get(key)
        for entry, value in entries.items() if isinstance(entries, Mapping) else ():
            if not isinstance(value, str):
                raise ConfigError(
                    f"{where}: key '{key}.{entry}': expected a string, got {_kind(value)}"
                )
    try:
        config = msgspec.convert(dict(table), McpServerConfig)
    except msgspec.ValidationError as exc:
        # msgspec says "Expected `str`, got `int` - at `$.command`": name the key our way.
        raise ConfigError(f"{where}: {locate(str(exc))}") from None
    if (config.command is None) == (config.url is None):
        raise ConfigError(f"{where}: give exactly one of 'command' (stdio) or 'url' (HTTP)")
    if config.command is not None and not config.command.strip():
        raise ConfigError(f"{where}: 'command' is empty")
    if config.url is not None and not config.url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: 'url' must start with http:// or https://, got {config.url!r}")
    for key in _TIMEOUTS:
        if getattr(config, key) <= 0:
            raise ConfigError(f"{where}: {key!r} must be positive, got {getattr(config, key)!r}")
    return config


def locate(message: str) -> str:
    """Rewrite msgspec's ``... - at `$.key[1]``` as ``key 'key[1]': ...``."""
    text, sep, path = message.rpartition(" - at `$.")
    if not sep:
        return message
    return f"key {path.rstrip('`')!r}: {text}"


def _kind(value: object) -> str:
    return type(value).__name__
