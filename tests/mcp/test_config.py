"""``parse_servers`` accepts Codex's per-server keys and names source, server and key on error;
``http_headers`` reads the secrets a server needs from the environment, never printing them."""

from __future__ import annotations

from typing import Any

import pytest

from plait import ConfigError, McpError
from plait.actors.mcp import McpServerConfig, parse_servers
from plait.actors.mcp._config import http_headers, missing_variables


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


def test_codex_keys_as_codex_spells_them() -> None:
    servers = parse_servers(
        {
            "figma": {
                "url": "https://mcp.figma.com/mcp",
                "bearer_token_env_var": "FIGMA_TOKEN",
                "http_headers": {"X-Team": "design"},
                "env_http_headers": {"X-Org": "FIGMA_ORG"},
                "startup_timeout_ms": 20_000,
                "required": True,
            },
            "ctx": {"command": "npx", "env_vars": ["NODE_ENV"], "startup_timeout_sec": 3},
        },
        "plait.toml",
    )
    figma, ctx = servers["figma"], servers["ctx"]
    assert figma.headers == {"X-Team": "design"} and figma.env_http_headers == {
        "X-Org": "FIGMA_ORG"
    }
    assert (figma.bearer_token_env_var, figma.startup_timeout_sec, figma.required) == (
        "FIGMA_TOKEN",
        20.0,
        True,
    )
    assert (ctx.env_vars, ctx.startup_timeout_sec, ctx.required) == (["NODE_ENV"], 3.0, False)
    both = {"command": "x", "startup_timeout_sec": 2, "startup_timeout_ms": 9000}
    assert parse_servers({"s": both}, "p")["s"].startup_timeout_sec == 2.0  # as Codex: _sec wins


def test_headers_come_from_the_config_and_the_environment() -> None:
    config = McpServerConfig(
        url="http://h/mcp",
        headers={"X-Team": "a"},
        env_http_headers={"X-Org": "ORG"},
        bearer_token_env_var="TOKEN",
    )
    env = {"ORG": "acme", "TOKEN": " t0k\n"}
    assert http_headers(config, env) == {
        "X-Team": "a",
        "X-Org": "acme",
        "Authorization": "Bearer t0k",
    }
    assert missing_variables(config, {"ORG": "acme"}) == [("bearer_token_env_var", "TOKEN")]
    with pytest.raises(McpError) as caught:
        http_headers(config, {"TOKEN": "t0k"})
    assert str(caught.value) == "env_http_headers.X-Org names $ORG, which is not set"
    with pytest.raises(McpError) as caught:
        http_headers(config, {"ORG": "acme", "TOKEN": "t0k\nX-Evil: 1"})
    assert "t0k" not in str(caught.value)
    assert str(caught.value) == (
        "bearer_token_env_var: $TOKEN holds a value that cannot be sent in a header"
    )


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"url": "http://h", "bearer_token": "t"}, "key 'bearer_token' is not supported: tokens"),
        ({"url": "http://h", "scopes": ["r"]}, "key 'scopes' is not supported: plait has no OAuth"),
        ({"command": "x", "http_headers": {"A": "b"}}, "key 'http_headers' is only for HTTP"),
        ({"command": "x", "bearer_token_env_var": "T"}, "'bearer_token_env_var' is only for HTTP"),
        ({"url": "http://h", "args": ["a"]}, "key 'args' is only for stdio servers"),
        ({"url": "http://h", "env_vars": ["A"]}, "key 'env_vars' is only for stdio servers"),
        (
            {"url": "http://h", "headers": {}, "http_headers": {}},
            "give 'http_headers' or 'headers', not both",
        ),
        (
            {"url": "http://h", "env_http_headers": {"A": 1}},
            "key 'env_http_headers.A': expected a string, got int",
        ),
        ({"command": "x", "startup_timeout_ms": "soon"}, "'startup_timeout_ms': expected a number"),
    ],
)
def test_codex_keys_are_checked(table: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_servers({"s": table}, "plait.toml")
    assert str(caught.value).startswith("plait.toml: mcp_servers.s: ")
    assert says in str(caught.value)
