"""Published MCP servers over stdio: ``mcp-server-time`` and ``mcp-server-git``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from plait.actors.mcp import (
    McpServerConfig,
    McpServers,
    merge,
    normalize_allowlist,
    openai_spec,
    tool_list_hash,
)

GIT_READ_ONLY = [
    "git_branch", "git_diff", "git_diff_staged", "git_diff_unstaged", "git_log", "git_show",
    "git_status",
]  # fmt: skip
GIT_WRITES = ["git_add", "git_checkout", "git_commit", "git_create_branch", "git_reset"]


@pytest.fixture(scope="module")
def servers(loop, bin_dir: Path, git_repo: Path, new_reports) -> Iterator[McpServers]:
    """Both servers, started together."""
    configs = {
        "time": McpServerConfig(
            command=str(bin_dir / "mcp-server-time"), args=["--local-timezone", "UTC"]
        ),
        "git": McpServerConfig(
            command=str(bin_dir / "mcp-server-git"), args=["--repository", str(git_repo)]
        ),
    }
    servers = McpServers(configs, new_reports())
    loop.run(servers.start())
    loop.run(servers.wait_ready("time", timeout=20))
    loop.run(servers.wait_ready("git", timeout=20))
    yield servers
    loop.run(servers.close())


def test_time_lists_two_read_only_tools(servers: McpServers) -> None:
    tools = servers.tools()["time"]
    assert [(t.name, t.read_only) for t in tools] == [
        ("time__convert_time", True),
        ("time__get_current_time", True),
    ]


def test_time_calls_answer_with_json(loop, servers: McpServers) -> None:
    now = loop.run(servers.call("time", "get_current_time", {"timezone": "Europe/Paris"}))
    assert now.outcome == "ok"
    assert msgspec.json.decode(now.output)["timezone"] == "Europe/Paris"
    arguments = '{"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}'
    converted = loop.run(servers.call("time", "convert_time", arguments))
    assert msgspec.json.decode(converted.output)["time_difference"] == "+9.0h"
    bad = loop.run(servers.call("time", "get_current_time", {}))
    assert bad.outcome == "error" and "'timezone' is a required property" in bad.output


def test_git_read_only_annotations_are_as_published(servers: McpServers) -> None:
    tools = {t.tool: t for t in servers.tools()["git"]}
    assert sorted(tools) == sorted(GIT_READ_ONLY + GIT_WRITES)
    assert sorted(name for name, t in tools.items() if t.read_only) == GIT_READ_ONLY
    assert tools["git_reset"].annotations["destructiveHint"] is True
    assert tools["git_commit"].annotations["destructiveHint"] is False


def test_git_calls_read_the_repository(loop, servers: McpServers, git_repo: Path) -> None:
    repo = git_repo
    log = loop.run(servers.call("git", "git_log", {"repo_path": str(repo)}))
    assert log.outcome == "ok" and "first commit" in log.output
    status = loop.run(servers.call("git", "git_status", {"repo_path": str(repo)}))
    assert "nothing to commit" in status.output
    refused = loop.run(servers.call("git", "git_add", {"repo_path": str(repo), "files": []}))
    assert refused.outcome == "error" and "at arguments.files: [] should be non-empty" in (
        refused.output
    )


def test_the_offered_list_is_sorted_and_stable(servers: McpServers) -> None:
    def offered() -> list[dict]:
        tools, conflicts = merge(servers.tools())
        assert conflicts == []
        return [openai_spec(t) for t in tools]

    specs = offered()
    names = [spec["function"]["name"] for spec in specs]
    assert names == sorted(names) and len(names) == 14
    assert names[0] == "git__git_add" and names[-1] == "time__get_current_time"
    assert tool_list_hash(specs) == tool_list_hash(offered())
    log = next(spec for spec in specs if spec["function"]["name"] == "git__git_log")
    assert log["function"]["parameters"]["required"] == ["repo_path"]


def test_allowlists_name_real_tools(servers: McpServers) -> None:
    known = [t.name for tools in servers.tools().values() for t in tools]
    names, warnings = normalize_allowlist(["git/git_status", "time__get_current_time"], known)
    assert names == ["git__git_status", "time__get_current_time"]
    assert warnings == [
        "mcp_allowlist entry 'git/git_status' uses the deprecated form server/tool; "
        "write 'git__git_status'"
    ]
