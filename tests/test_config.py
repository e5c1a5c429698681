"""``plait._config``: files, environment and flags, in that order; errors name file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait import ConfigError
from plait._config import DEFAULT_STORE, load_config


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def other_repository(tmp_path: Path) -> Path:
    """A directory under ``tmp_path`` that is a repository's root: the walk up from it stops
    there, short of ``tmp_path``'s files."""
    (tmp_path / "elsewhere" / ".git").mkdir(parents=True)
    return tmp_path / "elsewhere"


def test_no_file_gives_the_defaults_under_the_working_directory(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path, env={})
    assert config.model.model == "gpt-4o-mini"
    assert config.store.url == str(tmp_path / DEFAULT_STORE)
    assert config.policy.max_interrupt_chain_depth == 8
    assert config.source == "defaults"
    assert config.api_key is None


def test_the_reply_limits_have_defaults_and_reach_the_model_settings(tmp_path: Path) -> None:
    from plait.cli._common import model_settings

    defaults = load_config(cwd=tmp_path, env={}).model
    assert (defaults.max_reply_bytes, defaults.max_reply_sec) == (8 << 20, 600.0)
    write(tmp_path / "plait.toml", "[model]\nmax_reply_bytes = 4096\nmax_reply_sec = 30\n")
    config = load_config(cwd=tmp_path, env={"OPENAI_API_KEY": "sk-1"})
    settings = model_settings(config)
    assert (settings.max_reply_bytes, settings.max_reply_sec) == (4096, 30.0)


def test_the_file_then_the_environment_then_the_flags(tmp_path: Path) -> None:
    write(
        tmp_path / "plait.toml",
        '[model]\nmodel = "from-file"\napi_key_env = "MY_KEY"\n'
        '[store]\nurl = "logs/p.db"\n[policy]\nmax_interrupt_chain_depth = 3\n',
    )
    env = {"MY_KEY": "sk-1", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    config = load_config(cwd=tmp_path, env=env)
    assert (config.model.model, config.api_key) == ("from-file", "sk-1")
    assert config.model.base_url == "http://127.0.0.1:9/v1"
    assert config.store.url == str(tmp_path / "logs/p.db")
    assert config.policy.max_interrupt_chain_depth == 3
    assert config.source == str(tmp_path / "plait.toml")

    env |= {"PLAIT_MODEL": "from-env", "PLAIT_STORE": "postgresql://h/db"}
    config = load_config(cwd=tmp_path, env=env)
    assert (config.model.model, config.store.url) == ("from-env", "postgresql://h/db")
    config = load_config(cwd=tmp_path, env=env, model="from-flag", store="memory:")
    assert (config.model.model, config.store.url) == ("from-flag", "memory:")


def test_the_storage_policy_and_the_store_lock_wait_are_read(tmp_path: Path) -> None:
    write(
        tmp_path / "plait.toml", '[policy]\nstorage = "ttl:7d"\n[store]\nbusy_timeout_sec = 0.5\n'
    )
    config = load_config(cwd=tmp_path, env={"PLAIT_STORE": "other.db"})
    assert config.policy.storage == "ttl:7d"
    assert (config.store.url, config.store.busy_timeout_sec) == (str(tmp_path / "other.db"), 0.5)
    assert load_config(cwd=other_repository(tmp_path), env={}).policy.storage == "full"


def test_the_approval_policy_and_its_timeout_are_read(tmp_path: Path) -> None:
    write(tmp_path / "plait.toml", '[policy]\napproval = "on-write"\napproval_timeout_sec = 30\n')
    policy = load_config(cwd=tmp_path, env={}).policy
    assert (policy.approval, policy.approval_timeout_sec) == ("on-write", 30)
    default = load_config(cwd=other_repository(tmp_path), env={}).policy
    assert (default.approval, default.approval_timeout_sec) == ("never", 300)


def test_the_wire_is_read_as_codex_names_it(tmp_path: Path) -> None:
    write(tmp_path / "plait.toml", '[model]\nwire_api = "responses"\nstore = true\n')
    model = load_config(cwd=tmp_path, env={}).model
    assert (model.wire_api, model.store) == ("responses", True)
    default = load_config(cwd=other_repository(tmp_path), env={}).model
    assert (default.wire_api, default.store) == ("chat", False)


def test_the_environment_overrides_the_base_url_in_the_file(tmp_path: Path) -> None:
    write(tmp_path / "plait.toml", '[model]\nbase_url = "http://file/v1"\n')
    assert load_config(cwd=tmp_path, env={}).model.base_url == "http://file/v1"
    config = load_config(cwd=tmp_path, env={"OPENAI_BASE_URL": "http://env/v1"})
    assert config.model.base_url == "http://env/v1"


def test_plait_config_names_the_file(tmp_path: Path) -> None:
    write(tmp_path / "other.toml", '[model]\nmodel = "other"\n')
    assert load_config(cwd=tmp_path, env={"PLAIT_CONFIG": "other.toml"}).model.model == "other"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[model]\ntimeout_sec = "slow"\n', "model.timeout_sec: expected `float`, got `str`"),
        ('[model]\nmodle = "x"\n', "model.modle: unknown key"),
        ("colour = true\n", "colour: unknown key"),
        (
            '[policy]\napproval = "sometimes"\n',
            "policy.approval: invalid value 'sometimes': choose one of never, on-request, "
            "on-write, untrusted",
        ),
        (
            "[policy]\napproval_timeout_sec = 0\n",
            "policy.approval_timeout_sec: expected `float` > 0.0",
        ),
        ("[model]\ntimeout_sec = 0\n", "model.timeout_sec: expected `float` > 0.0"),
        (
            '[model]\nwire_api = "completions"\n',
            "model.wire_api: invalid value 'completions': choose one of chat, responses",
        ),
        ("[model]\nmax_reply_bytes = 0\n", "model.max_reply_bytes: expected `int` >= 1"),
        ("[model]\nmax_reply_sec = -1\n", "model.max_reply_sec: expected `float` > 0.0"),
        ('[model]\nmax_reply_sec = "1m"\n', "model.max_reply_sec: expected `float`, got `str`"),
        (
            "[policy]\nmax_concurrent_tool_calls = 0\n",
            "policy.max_concurrent_tool_calls: expected `int` >= 1",
        ),
        (
            '[policy]\nstorage = "forever"\n',
            "policy.storage: storage policy 'forever': expected full, headers_only, none or ttl:",
        ),
        (
            '[model]\napi_key = "sk-1"\n',
            "model.api_key: unknown key (keys stay out of files: set the variable that "
            "model.api_key_env names)",
        ),
        ("[model\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path / "plait.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path, env={})
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_named_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the configuration"):
        load_config("nope.toml", cwd=tmp_path, env={})


def test_the_user_file_is_read_under_the_project_file(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "plait" / "config.toml"
    user.parent.mkdir(parents=True)
    write(
        user,
        '[model]\nmodel = "user"\ntemperature = 0.5\n'
        '[mcp_servers.git]\ncommand = "mcp-server-git"\nargs = ["--repository", "."]\n',
    )
    write(
        tmp_path / "plait.toml", '[model]\nmodel = "project"\n[mcp_servers.git]\nenabled = false\n'
    )
    config = load_config(cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert (config.model.model, config.model.temperature) == ("project", 0.5)
    git = config.mcp_servers["git"]
    assert (git.command, git.args, git.enabled) == ("mcp-server-git", ["--repository", "."], False)
    assert config.source == f"{user}, {tmp_path / 'plait.toml'}"
    # Without XDG_CONFIG_HOME: under $HOME/.config; with neither variable, no user file.
    elsewhere = other_repository(tmp_path)
    home = load_config(cwd=elsewhere, env={"HOME": str(tmp_path / "home")})
    assert home.source == "defaults"
    (tmp_path / "home" / ".config").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "plait").symlink_to(user.parent)
    home = load_config(cwd=elsewhere, env={"HOME": str(tmp_path / "home")})
    assert home.model.model == "user"


def test_a_bad_user_file_names_itself(tmp_path: Path) -> None:
    user = tmp_path / "plait" / "config.toml"
    user.parent.mkdir()
    write(user, '[mcp_servers.git]\ncomand = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert str(caught.value).startswith(f"{user}: mcp_servers.git: unknown key 'comand'")


def test_c_overrides_go_last_the_value_read_as_toml_else_as_text(tmp_path: Path) -> None:
    write(tmp_path / "plait.toml", '[mcp_servers.git]\ncommand = "mcp-server-git"\n')
    env = {"PLAIT_MODEL": "from-env", "PLAIT_STORE": "env.db"}
    overrides = [
        "model.model=gpt-5",  # not TOML: the text
        "model.stop=['END', 'STOP']",
        "policy.max_interrupt_chain_depth=3",
        "store.url=c.db",
        "mcp_servers.git.enabled=false",
        "mcp_servers.time.command=mcp-server-time",
    ]
    config = load_config(
        cwd=tmp_path, env=env, model="from-flag", store="flag.db", overrides=overrides
    )
    assert (config.model.model, config.model.stop) == ("gpt-5", ["END", "STOP"])
    assert config.policy.max_interrupt_chain_depth == 3
    assert config.store.url == str(tmp_path / "c.db")
    assert config.mcp_servers["git"].enabled is False
    assert config.mcp_servers["time"].command == "mcp-server-time"
    assert config.source.endswith(", -c mcp_servers.time.command=mcp-server-time")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.modle=x", "-c model.modle=x: model.modle: unknown key"),
        ("policy.max_interrupt_chain_depth=many", "expected `int`, got `str`"),
        ("model", "-c model: expected KEY.PATH=VALUE"),
        ("model..model=x", "-c model..model=x: expected KEY.PATH=VALUE"),
        ("mcp_servers.git.comand=x", "-c mcp_servers.git.comand=x: mcp_servers.git: unknown key"),
        ("mcp_servers.new.args=['a']", "-c mcp_servers.new.args=['a']: mcp_servers.new: give"),
    ],
)
def test_a_bad_override_names_itself(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path, env={}, overrides=[override])
    assert message in str(caught.value)


def test_mcp_json_in_the_forms_other_agents_write(tmp_path: Path) -> None:
    claude = {
        "mcpServers": {
            "local": {
                "type": "stdio",
                "command": "${BIN:-/usr/bin}/server",
                "args": ["--root", "${workspaceFolder}", "${env:MODE}"],
                "env": {"TOKEN": "${TOKEN}", "EMPTY": "${UNSET:-}"},
            },
            "remote": {
                "type": "http",
                "url": "https://${HOST}/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}"},
            },
        }
    }
    write(tmp_path / ".mcp.json", json.dumps(claude))
    vscode = {"inputs": [], "servers": {"docs": {"type": "http", "url": "http://127.0.0.1:1/mcp"}}}
    write(tmp_path / "mcp.json", json.dumps(vscode))
    env = {"MODE": "fast", "TOKEN": "t0k", "HOST": "h.example"}
    config = load_config(cwd=tmp_path, env=env)  # both found in the working directory
    local, remote = config.mcp_servers["local"], config.mcp_servers["remote"]
    assert local.command == "/usr/bin/server"
    assert local.args == ["--root", str(tmp_path), "fast"]
    assert local.env == {"TOKEN": "t0k", "EMPTY": ""}
    assert (remote.url, remote.headers) == (
        "https://h.example/mcp",
        {"Authorization": "Bearer t0k"},
    )
    assert config.mcp_servers["docs"].transport == "http"
    assert config.source == f"{tmp_path / '.mcp.json'}, {tmp_path / 'mcp.json'}"
    # Named: only those; an empty list: none.
    write(tmp_path / "plait.toml", 'mcp_json = ["mcp.json"]\n')
    assert list(load_config(cwd=tmp_path, env=env).mcp_servers) == ["docs"]
    write(tmp_path / "plait.toml", "mcp_json = []\n")
    assert load_config(cwd=tmp_path, env=env).mcp_servers == {}


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (
            {"command": "s", "env": {"K": "${MISSING}"}},
            "mcpServers.s: key 'env.K' needs ${MISSING}, which is not set",
        ),
        (
            {"type": "sse", "url": "http://h/sse"},
            "mcpServers.s: type 'sse' is not supported: plait speaks stdio and streamable HTTP",
        ),
        ({"type": "ws", "url": "ws://h"}, "key 'type': expected 'stdio' or 'http', got 'ws'"),
        ({"type": "http", "command": "s"}, "mcpServers.s: type 'http' needs 'url'"),
        ({"command": "s", "envFile": ".env"}, "mcpServers.s: unknown key 'envFile'"),
    ],
)
def test_a_bad_mcp_json_entry_names_the_file_the_server_and_the_key(
    tmp_path: Path, server: dict[str, object], message: str
) -> None:
    write(tmp_path / ".mcp.json", json.dumps({"mcpServers": {"s": server}}))
    with pytest.raises(ConfigError) as caught:
        load_config(cwd=tmp_path, env={})
    assert str(caught.value).startswith(f"{tmp_path / '.mcp.json'}: ")
    assert message in str(caught.value)


def test_an_mcp_json_without_servers_says_what_it_expected(tmp_path: Path) -> None:
    write(tmp_path / "mcp.json", '{"servers": []}')
    with pytest.raises(ConfigError, match=r'expected an object with "mcpServers" \(or VS Code'):
        load_config(cwd=tmp_path, env={})


def test_the_signing_key_is_read_from_the_file_the_environment_or_c(tmp_path: Path) -> None:
    """Relative to the file that names it; ``PLAIT_SIGNING_KEY`` over the files, ``-c`` over
    both (docs/event-log.md#signed-heads)."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    write(project / "plait.toml", '[audit]\nsigning_key = "keys/audit.key"\n')
    inside = project / "src"
    assert load_config(cwd=inside, env={}).audit.signing_key == str(project / "keys/audit.key")
    env = {"PLAIT_SIGNING_KEY": "mine.key"}
    assert load_config(cwd=inside, env=env).audit.signing_key == str(inside / "mine.key")
    pinned = load_config(cwd=inside, env=env, overrides=['audit.signing_key="/k/a.key"'])
    assert pinned.audit.signing_key == "/k/a.key"
    assert load_config(cwd=other_repository(tmp_path), env={}).audit.signing_key is None
    write(project / "plait.toml", "[audit]\nsigning_kee = 1\n")
    with pytest.raises(ConfigError, match="signing_kee"):
        load_config(cwd=project, env={})


def test_the_witness_is_read_from_the_file_the_environment_or_c(tmp_path: Path) -> None:
    """As the signing key: relative to the file that names it; ``PLAIT_WITNESS`` over the
    files, ``-c`` over both; unset, none (the writer puts it beside the key)."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    write(project / "plait.toml", '[audit]\nwitness = "../audit/plait.heads"\n')
    inside = project / "src"
    found = load_config(cwd=inside, env={}).audit.witness
    assert found == str(project / "../audit/plait.heads")
    env = {"PLAIT_WITNESS": "mine.heads"}
    assert load_config(cwd=inside, env=env).audit.witness == str(inside / "mine.heads")
    pinned = load_config(cwd=inside, env=env, overrides=['audit.witness="/w/a.heads"'])
    assert pinned.audit.witness == "/w/a.heads"
    assert load_config(cwd=other_repository(tmp_path), env={}).audit.witness is None
