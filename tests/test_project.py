"""``plait._project``: the walk up from the working directory, as git finds ``.git``; and the
paths the configuration reads relative to the file that holds them."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from plait import ConfigError
from plait._config import load_config
from plait._project import find_project, walk
from plait.cli._chat_input import custom_commands
from plait.cli._instructions import session_instructions, user_dir

NOBODY = 65534
"""Another user: what the tests chown to (they run as root, or as the owner of their files)."""


def tree(root: Path, *paths: str) -> None:
    """Make files (``name``) and directories (``name/``) under ``root``."""
    for path in paths:
        target = root / path
        if path.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")


def test_the_walk_stops_at_the_repository_root(tmp_path: Path) -> None:
    tree(tmp_path, "plait.toml", "repo/.git/", "repo/a/b/")
    deep = tmp_path / "repo" / "a" / "b"
    assert walk(deep) == [deep, deep.parent, tmp_path / "repo"]
    found = find_project(deep)
    assert (found.repo, found.config) == (tmp_path / "repo", None)  # plait.toml is outside
    assert found.store == tmp_path / "repo" / ".plait" / "plait.db"  # a new one: at the root


def test_the_nearest_of_each_wins(tmp_path: Path) -> None:
    tree(
        tmp_path,
        ".git/",
        "plait.toml",
        ".mcp.json",
        ".plait/commands/",
        "svc/plait.toml",
        "svc/x/mcp.json",
        "svc/x/.mcp.json",
        "svc/x/y/",
    )
    found = find_project(tmp_path / "svc" / "x" / "y")
    assert found.config == tmp_path / "svc" / "plait.toml"
    assert found.mcp_json == (tmp_path / "svc/x/.mcp.json", tmp_path / "svc/x/mcp.json")
    assert found.commands == tmp_path / ".plait" / "commands"
    assert found.home == tmp_path / "svc"


def test_a_store_is_found_up_to_the_plait_toml_and_made_beside_it(tmp_path: Path) -> None:
    tree(tmp_path, ".git/", ".plait/plait.db", "svc/plait.toml", "svc/x/")
    # The root's store belongs to the root's project, not to svc's.
    assert find_project(tmp_path / "svc" / "x").store == tmp_path / "svc" / ".plait" / "plait.db"
    assert find_project(tmp_path / "other").store == tmp_path / ".plait" / "plait.db"
    tree(tmp_path, "svc/x/.plait/plait.db")  # one made there before: the nearest wins
    assert find_project(tmp_path / "svc" / "x").store == tmp_path / "svc/x/.plait/plait.db"


def test_outside_a_repository_a_new_store_goes_in_the_working_directory(tmp_path: Path) -> None:
    tree(tmp_path, "a/b/")
    found = find_project(tmp_path / "a" / "b")
    assert found.repo is None and found.store == tmp_path / "a" / "b" / ".plait" / "plait.db"


def test_paths_in_a_file_are_read_from_its_directory(tmp_path: Path) -> None:
    tree(tmp_path, ".git/", "sub/deep/")
    (tmp_path / "plait.toml").write_text(
        '[store]\nurl = "logs/p.db"\n'
        '[mcp_servers.here]\ncommand = "./bin/s"\n'
        '[mcp_servers.there]\ncommand = "s"\ncwd = "tools"\n'
        '[mcp_servers.far]\nurl = "http://127.0.0.1:1/mcp"\n'
    )
    deep = tmp_path / "sub" / "deep"
    config = load_config(cwd=deep, env={})
    assert config.store.url == str(tmp_path / "logs" / "p.db")
    servers = config.mcp_servers
    assert servers["here"].cwd == str(tmp_path)  # no cwd: the file's directory
    assert servers["there"].cwd == str(tmp_path / "tools")
    assert servers["far"].cwd is None
    # Given on the command line or in the environment: from the working directory.
    assert load_config(cwd=deep, env={"PLAIT_STORE": "x.db"}).store.url == str(deep / "x.db")
    flagged = load_config(cwd=deep, env={}, overrides=["mcp_servers.there.cwd=w"])
    assert flagged.mcp_servers["there"].cwd == str(deep / "w")


def test_a_users_server_runs_where_plait_runs(tmp_path: Path) -> None:
    user = tmp_path / "xdg" / "plait" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[mcp_servers.git]\ncommand = "mcp-server-git"\n')
    config = load_config(cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert config.mcp_servers["git"].cwd is None


def test_an_mcp_json_is_read_from_its_directory(tmp_path: Path) -> None:
    tree(tmp_path, ".git/", "sub/")
    server = {"command": "s", "args": ["${workspaceFolder}/x"]}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "servers.json").write_text(json.dumps({"mcpServers": {"s": server}}))
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"m": server}}))
    found = load_config(cwd=tmp_path / "sub", env={}).mcp_servers["m"]
    assert (found.args, found.cwd) == ([f"{tmp_path}/x"], str(tmp_path))
    (tmp_path / "plait.toml").write_text('mcp_json = ["conf/servers.json"]\n')
    named = load_config(cwd=tmp_path / "sub", env={}).mcp_servers
    assert list(named) == ["s"] and named["s"].args == [f"{tmp_path / 'conf'}/x"]


def test_a_vscode_mcp_json_serves_the_folder_holding_vscode(tmp_path: Path) -> None:
    # VS Code's ${workspaceFolder} is the folder it opened, the parent of .vscode/.
    tree(tmp_path, ".git/", "svc/.vscode/", "svc/src/")
    server = {"type": "stdio", "command": "node", "args": ["${workspaceFolder}/server.js"]}
    named = {**server, "cwd": "tools"}
    (tmp_path / "svc" / ".vscode" / "mcp.json").write_text(
        json.dumps({"servers": {"js": server, "named": named}})
    )
    (tmp_path / "plait.toml").write_text('mcp_json = ["svc/.vscode/mcp.json"]\n')
    servers = load_config(cwd=tmp_path / "svc" / "src", env={}).mcp_servers
    assert servers["js"].args == [f"{tmp_path / 'svc'}/server.js"]
    assert servers["js"].cwd == str(tmp_path / "svc")  # runs where VS Code runs it
    assert servers["named"].cwd == str(tmp_path / "svc" / "tools")


def test_a_broken_server_table_is_kept_for_the_commands_that_start_none(tmp_path: Path) -> None:
    (tmp_path / "plait.toml").write_text('[model]\nmodel = "m"\n[mcp_servers.git]\nargs = 3\n')
    config = load_config(cwd=tmp_path, env={}, mcp_servers=False)
    assert config.model.model == "m" and config.mcp_servers == {}
    assert config.mcp_problem is not None
    assert config.mcp_problem.startswith(f"{tmp_path / 'plait.toml'}: mcp_servers.git: ")


def test_chat_finds_the_nearest_custom_commands(tmp_path: Path) -> None:
    tree(tmp_path, ".git/", ".plait/commands/review.md", "a/b/")
    found = custom_commands(tmp_path / "a" / "b")
    assert found.get("review") == tmp_path / ".plait" / "commands" / "review.md"


def test_outside_a_repository_the_walk_stops_at_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(tmp_path, "plait.toml", ".mcp.json", "AGENTS.md", "home/me/notes/", "elsewhere/")
    home, notes = tmp_path / "home" / "me", tmp_path / "home" / "me" / "notes"
    monkeypatch.setenv("HOME", str(home))
    assert walk(notes) == [notes, home]
    found = find_project(notes)
    assert (found.config, found.mcp_json) == (None, ())  # above home: not looked at
    # Not under the home directory: up to the filesystem's root, as before.
    assert find_project(tmp_path / "elsewhere").config == tmp_path / "plait.toml"
    tree(tmp_path, "home/.git/")  # nor is a repository holding it: home is the ceiling
    assert walk(notes)[-1] == home and find_project(notes).repo is None


def owned_by_nobody(root: Path, *paths: str) -> None:
    """Give ``paths`` under ``root`` (made by ``tree``) to another user."""
    for path in paths:
        os.chown(root / path, NOBODY, NOBODY)


def test_files_another_user_owns_are_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree(
        tmp_path,
        ".git/",
        "plait.toml",
        "mcp.json",
        "AGENTS.md",
        ".plait/commands/review.md",
        "work/plait.toml",
        "work/.mcp.json",
        "work/mcp.json",
        "work/AGENTS.md",
        "work/.plait/commands/review.md",
        "work/.plait/plait.db",
    )
    (tmp_path / "AGENTS.md").write_text("Mine.\n")
    (tmp_path / "work" / "AGENTS.md").write_text("Theirs.\n")
    owned_by_nobody(tmp_path, "work/plait.toml", "work/.mcp.json", "work/AGENTS.md", "work/.plait")
    work = tmp_path / "work"
    with caplog.at_level(logging.WARNING, "plait._project"):
        found = find_project(work)
        rules = session_instructions(work)
    # The next one up is used instead, as if theirs were not there.
    assert found.config == tmp_path / "plait.toml"
    assert found.mcp_json == (work / "mcp.json",)
    assert found.commands == tmp_path / ".plait" / "commands"
    assert found.store == tmp_path / ".plait" / "plait.db"
    assert "Mine." in rules and "Theirs." not in rules
    assert custom_commands(work)["review"] == tmp_path / ".plait/commands/review.md"
    told = {record.getMessage() for record in caplog.records}
    why = "it belongs to nobody (uid 65534), not to you or root"
    for path in ("plait.toml", ".mcp.json", "AGENTS.md", ".plait/commands", ".plait/plait.db"):
        assert f"not using {work / path}: {why} (anyone could have put it there)" in told


def test_a_shared_directory_cannot_hand_its_servers_or_store_to_its_users(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As /tmp: anyone may write in it, and one user left a project there for the others.
    shared = tmp_path / "shared"
    tree(shared, ".git/", "plait.toml", ".mcp.json", ".plait/plait.db", "mine/")
    shared.chmod(0o1777)
    (shared / ".mcp.json").write_text(json.dumps({"mcpServers": {"x": {"command": "evil"}}}))
    (shared / "plait.toml").write_text('[model]\nbase_url = "http://evil.example/v1"\n')
    owned_by_nobody(shared, ".git", "plait.toml", ".mcp.json", ".plait", ".plait/plait.db")
    mine = shared / "mine"
    found = find_project(mine)
    assert found.repo is None and found.config is None and found.mcp_json == ()
    assert found.store == mine / ".plait" / "plait.db"  # a new one, the user's own
    config = load_config(cwd=mine, env={})
    assert config.mcp_servers == {} and config.model.base_url is None
    assert config.store.url == str(mine / ".plait" / "plait.db")
    # Run in the shared directory itself: where the store would go is theirs.
    with pytest.raises(ConfigError) as refused:
        load_config(cwd=shared, env={})
    assert str(refused.value) == (
        f"{shared / '.plait/plait.db'}: not used as the store, it (or its directory) belongs to"
        " another user: name a store with --store or [store] url"
    )
    assert load_config(cwd=shared, env={}, store="here.db").store.url == str(shared / "here.db")


def test_a_link_to_a_users_own_file_left_by_another_is_not_used(tmp_path: Path) -> None:
    tree(tmp_path, "mine/plait.toml", "shared/")
    (tmp_path / "shared" / "plait.toml").symlink_to(tmp_path / "mine" / "plait.toml")
    os.chown(tmp_path / "shared" / "plait.toml", NOBODY, NOBODY, follow_symlinks=False)
    assert find_project(tmp_path / "shared").config is None


def test_the_tests_read_no_configuration_of_the_machines_user() -> None:
    # tests/conftest.py points XDG_CONFIG_HOME at an empty directory of the run's.
    assert not any(user_dir().parent.iterdir())
    assert load_config(cwd=user_dir().parent).source == "defaults"
