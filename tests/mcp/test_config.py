"""``parse_servers`` accepts Codex's per-server keys and names source, server and key on error."""

from __future__ import annotations

from typing import Any

import pytest

from plait.actors.mcp import McpServerConfig, parse_servers
from plait.errors import ConfigError


def test_a_stdio_and_an_http_server_parse_with_defaults() -> None:
    servers = parse_servers(
        {
            "git": {"command": "mcp-server-git", "args": ["--repository", "."], "env": {"A": "1"}},
            "remote_1": {"url": "https://example.com/mcp", "headers": {"Authorization": "x"}},
        },
        "plait.toml",
    )
    git, remote = servers["git"], servers["remote_1"]
    assert (git.transport, remote.transport) == ("stdio", "http")
    assert git.args == ["--repository", "."] and git.env == {"A": "1"}
    assert (git.startup_timeout_sec, git.tool_timeout_sec, git.enabled) == (10.0, 60.0, True)
    assert git.enabled_tools is None and git.disabled_tools == [] and git.read_only_tools == []
    assert remote.headers == {"Authorization": "x"}


def test_every_key_is_read() -> None:
    table: dict[str, Any] = {
        "command": "srv",
        "args": ["a"],
        "env": {"K": "v"},
        "cwd": "/tmp",
        "enabled_tools": ["t1", "t2"],
        "disabled_tools": ["t2"],
        "startup_timeout_sec": 2,
        "tool_timeout_sec": 0.5,
        "read_only_tools": ["t1"],
        "enabled": False,
    }
    config = parse_servers({"s": table}, "plait.toml")["s"]
    assert config == McpServerConfig(**table)
    assert config.startup_timeout_sec == 2.0
    assert config.offers("t1") and not config.offers("t2") and not config.offers("t3")


def test_no_servers_is_fine() -> None:
    assert parse_servers({}, "mcp.json") == {}


@pytest.mark.parametrize(
    ("servers", "says"),
    [
        ({"git/hub": {"command": "x"}}, "mcp.json: MCP server name 'git/hub' is invalid"),
        ({"": {"command": "x"}}, "MCP server name '' is invalid"),
        ({"s": {"command": "x", "comand": "y"}}, "mcp.json: mcp_servers.s: unknown key 'comand'"),
        ({"s": {"command": "x", "url": "http://h/mcp"}}, "mcp_servers.s: give exactly one of"),
        ({"s": {"args": ["x"]}}, "mcp_servers.s: give exactly one of"),
        ({"s": {"command": 3}}, "mcp_servers.s: key 'command': Expected `str | null`, got `int`"),
        ({"s": {"command": "x", "args": "a b"}}, "mcp_servers.s: key 'args': Expected `array`"),
        (
            {"s": {"command": "x", "env": {"A": 1}}},
            "mcp_servers.s: key 'env.A': expected a string, got int",
        ),
        ({"s": {"command": "x", "enabled": "yes"}}, "key 'enabled': Expected `bool`"),
        ({"s": {"command": "x", "tool_timeout_sec": 0}}, "'tool_timeout_sec' must be positive"),
        ({"s": {"command": " "}}, "mcp_servers.s: 'command' is empty"),
        ({"s": {"url": "ftp://h"}}, "'url' must start with http:// or https://"),
        ({"s": ["command", "x"]}, "mcp_servers.s: expected a table, got list"),
    ],
)
def test_errors_name_the_source_the_server_and_the_key(servers: Any, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_servers(servers, "mcp.json")
    assert says in str(caught.value)
    assert str(caught.value).startswith("mcp.json: ")


def test_a_non_table_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"plait\.toml: mcp_servers must be a table, got list"):
        parse_servers(["git"], "plait.toml")  # type: ignore[arg-type]
