"""``plait.config``: files, environment and flags, in that order; errors name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.config import DEFAULT_STORE, load_config
from plait.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_no_file_gives_the_defaults_under_the_working_directory(tmp_path: Path) -> None:
    config = load_config(cwd=tmp_path, env={})
    assert config.model.model == "gpt-4o-mini"
    assert config.store.url == str(tmp_path / DEFAULT_STORE)
    assert config.policy.max_interrupt_chain_depth == 8
    assert config.source == "defaults"
    assert config.api_key is None


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
    assert load_config(cwd=tmp_path / "nowhere", env={}).policy.storage == "full"


def test_the_approval_policy_and_its_timeout_are_read(tmp_path: Path) -> None:
    write(tmp_path / "plait.toml", '[policy]\napproval = "on-write"\napproval_timeout_sec = 30\n')
    policy = load_config(cwd=tmp_path, env={}).policy
    assert (policy.approval, policy.approval_timeout_sec) == ("on-write", 30)
    default = load_config(cwd=tmp_path / "nowhere", env={}).policy
    assert (default.approval, default.approval_timeout_sec) == ("never", 300)


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
        ('[policy]\napproval = "sometimes"\n', "policy.approval: invalid enum value 'sometimes'"),
        (
            "[policy]\napproval_timeout_sec = 0\n",
            "policy.approval_timeout_sec: expected `float` > 0.0",
        ),
        ("[model]\ntimeout_sec = 0\n", "model.timeout_sec: expected `float` > 0.0"),
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
