"""The commands that read and reshape the log, as a user runs them: sessions, conversations,
history, log (and ``--follow``), fork and replay, recover, expire; and what a user gets
wrong (a bad configuration, an unknown session, a locked store) is one line."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from scripted import runtime_for
from support import sqlite_tamper

from plait.cli import main
from plait.cli._parser import build_parser
from plait.events import ModelRequested, SqliteStore, StoragePolicy
from plait.replay import fork
from plait.testing import ScriptedModelServer, Step

if TYPE_CHECKING:
    from conftest import Cli


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_sessions_conversations_and_history(recorded: Cli) -> None:
    (row,) = json_lines(recorded("sessions", "--json").stdout)
    assert row["session_id"] == "rec-1" and row["last_seq"] == 34
    assert (row["model"], row["closed"], row["forked_from"]) == ("scripted-model", True, None)
    assert (row["owner"], row["lease"]) == (None, "free")  # closed: handed back
    (line,) = recorded("sessions").stdout.splitlines()  # a pipe: rows, no header
    active = row["last_active_at"][:19].replace("T", " ")  # to the second, in UTC
    assert line == f"rec-1    {active}      34  closed  How many?"  # columns as on a terminal

    conversations = recorded("conversations", "rec").stdout.splitlines()
    assert [line.split()[:4] for line in conversations] == [
        ["rec-2", "root", "6", "messages"],
        ["rec-4", "created", "by", "rec-2"],
    ]

    history = recorded("history", "rec-1").stdout.splitlines()
    assert history[0] == "     user: How many?"
    assert history[1] == (
        'assistant: Asking a helper. -> conv_create({"user_instruction": "Count."})'
    )
    assert history[2].startswith("     tool (call_1): ")
    assert history[3:] == [
        "assistant: The helper says two.",
        "     user: Sure?",
        "assistant: Still two.",
    ]
    helper = json_lines(recorded("history", "rec", "--conversation", "rec-4", "--json").stdout)
    assert helper == [
        {"seq": 14, "role": "user", "content": "Count."},
        {"seq": 17, "role": "assistant", "content": "There are two."},
    ]


def test_log_prints_every_event_with_its_body(recorded: Cli) -> None:
    lines = recorded("log", "rec").stdout.splitlines()
    assert len(lines) == 34
    seq, _, kind, conversation, task, *body = lines[6].split()
    assert (seq, kind, conversation, task) == ("7", "ModelResponded", "rec-2", "rec-3")
    assert " ".join(body).startswith('{"text":"Asking a helper.","tool_calls":[{"id":"call_1"')
    events = json_lines(recorded("log", "rec", "--json").stdout)
    assert [e["seq"] for e in events] == list(range(1, 35))
    assert events[-1]["body"] == {"type": "SessionClosed", "reason": "closed by the embedder"}


def test_log_follow_prints_new_events_as_they_are_recorded(cli: Cli) -> None:
    session = cli.record("fol")
    following = cli.spawn("log", session, "--follow", "--json")
    assert '"seq":34' in following.out.until('"SessionClosed"')[-1]
    with (
        ScriptedModelServer([Step(text="Followed.")]) as server,
        runtime_for(server, cli.store.parent) as runtime,
    ):
        runtime.resume(session).run("Anyone there?", timeout=30)
        shown = [json.loads(line) for line in following.out.until('"TaskCompleted"')]
    # Resumed after its close, the session is reopened first (docs/processes.md#a-sessions-life).
    assert shown[0]["seq"] == 35
    assert shown[0]["body"] == {"type": "SessionReopened", "closed_seq": 34}
    assert shown[1]["body"]["type"] == "TaskEnqueued"
    assert shown[-1]["body"] == {"type": "TaskCompleted", "last_assistant_message": "Followed."}
    code, err = following.stop()
    assert code == 0 and err == f"following {session}; Ctrl-C to stop\n"


def test_fork_prints_the_new_session_and_the_fork_replays(cli: Cli) -> None:
    session = cli.record("src")
    forked = cli("fork", "src", "--at", "26")
    assert forked.returncode == 0, forked.stderr
    new = forked.stdout.strip()
    assert forked.stderr.startswith("forked src-1 at seq 26; go on with: plait exec --session")
    replayed = cli("replay", new)
    assert replayed.stdout == "replayed 26 of 26 events: no difference\n"
    rows = {r["session_id"]: r for r in json_lines(cli("sessions", "--json").stdout)}
    assert rows[new]["forked_from"] == {"session_id": session, "at_seq": 26}
    assert rows[session]["last_seq"] == 34  # the source is untouched
    too_far = cli("fork", "src-1", "--at", "99")
    assert too_far.stderr == (
        "plait: session src-1: cannot fork at seq 99: choose 2 to 34 "
        "(the root conversation is opened at seq 2)\n"
    )


def test_recover_resumes_sessions_left_in_flight_and_runs_their_waiting_tasks(
    cli: Cli, server: ScriptedModelServer
) -> None:
    session = cli.record("src")
    with SqliteStore(cli.store) as store:
        events = store.read(session)
        # The helper's task is src-5, the root's continuation src-6. Cut once both are
        # queued: nothing runs, two tasks wait. Cut inside the helper's model request: it
        # crashed, the continuation waits.
        queued = next(e.seq for e in events if e.task_id == "src-6")
        asked = next(
            e.seq for e in events if isinstance(e.body, ModelRequested) and e.task_id == "src-5"
        )
        fork(store, session, queued, new_session_id="waiting")
        fork(store, session, asked, new_session_id="crashed")
    cli.configure(server.base_url)
    server.push(*[Step(text="Recovered.")] * 4)
    result = cli("recover")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [
        "crashed  task src-5 crashed, 1 waiting: resumed",
        "waiting  none running, 2 waiting: resumed",
    ]
    history = json_lines(cli("history", "waiting", "--json").stdout)
    assert history[-1]["content"] == "Recovered."  # the root's continuation ran
    assert cli("replay", "waiting").returncode == 0
    assert all(row["closed"] for row in json_lines(cli("sessions", "--json").stdout))


def test_compact_summarises_a_conversation_and_history_shows_the_summary(
    cli: Cli, server: ScriptedModelServer
) -> None:
    session = cli.record("cmp")
    cli.configure(server.base_url, top="[history]\nkeep_recent_tokens = 1\n\n")
    server.push(Step(text="They counted two, twice."))
    result = cli("compact", "cmp", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json_lines(result.stdout)
    assert (row["conversation_id"], row["trigger"], row["kept_from"]) == ("cmp-2", "manual", 4)
    assert row["summary"] == "They counted two, twice."
    assert server.requests[-1].messages[0]["content"].startswith("You are compacting")
    history = json_lines(cli("history", session, "--json").stdout)
    assert [m["content"] for m in history[:2]] == ["They counted two, twice.", "Sure?"]
    assert cli("replay", session).returncode == 0
    again = cli("compact", "cmp")  # what is left is the latest turn: nothing to compact
    assert again.returncode == 0 and "nothing to compact" in again.stderr


def test_expire_deletes_the_content_a_ttl_policy_let_lapse(cli: Cli) -> None:
    session = cli.record("ttl", storage_policy=StoragePolicy("ttl", 0.001), expire_every_sec=None)
    result = cli("expire")
    deleted = int(result.stdout.split()[1])
    assert result.stdout == f"deleted {deleted} blobs\n" and deleted > 0
    assert json_lines(cli("expire", "--json").stdout) == [{"deleted": 0}]
    history = cli("history", session, "--limit", "1").stdout
    assert history.startswith("assistant: [redacted: 10 bytes]")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[model]\nmodle = "x"\n', "plait.toml: model.modle: unknown key"),
        (
            "[policy]\nmax_interrupt_chain_depth = 'deep'\n",
            "plait.toml: policy.max_interrupt_chain_depth: expected `int`, got `str`",
        ),
        (
            '[policy]\nstorage = "forever"\n',
            "plait.toml: policy.storage: storage policy 'forever': expected full, "
            "headers_only, none or ttl:SECONDS (e.g. ttl:3600, ttl:7d)",
        ),
        (
            'mcp_json = ["mcp.json"]\n',
            "mcp.json: mcpServers.git: unknown key 'comand' (known: args, "
            "bearer_token_env_var, command, cwd, disabled_tools, enabled, enabled_tools, env, "
            "env_http_headers, env_vars, headers, http_headers, idempotent_tools, "
            "read_only_tools, required, scope, startup_timeout_ms, startup_timeout_sec, "
            "tool_timeout_sec, type, url)",
        ),
    ],
)
def test_a_bad_configuration_is_one_line_naming_file_and_key(
    cli: Cli, toml: str, message: str
) -> None:
    (cli.cwd / "plait.toml").write_text(toml)
    (cli.cwd / "mcp.json").write_text('{"mcpServers": {"git": {"comand": "mcp-server-git"}}}')
    result = cli("exec", "Hello?")  # a command that starts servers: the servers' keys count
    assert (result.returncode, result.stderr) == (1, f"plait: {message}\n")


def test_the_config_file_is_named_by_flag_or_environment(cli: Cli) -> None:
    missing = cli("--config", "elsewhere.toml", "sessions")
    assert missing.stderr == (
        "plait: elsewhere.toml: cannot read the configuration: No such file or directory\n"
    )
    (cli.cwd / "other.toml").write_text('[store]\nurl = "other.db"\n')
    named = cli("sessions", env={"PLAIT_CONFIG": "other.toml"})
    assert (
        named.stderr == "plait: other.db: no store here (run `plait exec` first, or pass --store)\n"
    )


@pytest.mark.parametrize("command", [["history", "nope"], ["exec", "--session", "nope", "hi"]])
def test_an_unknown_session_is_one_line(recorded: Cli, command: list[str]) -> None:
    result = recorded(*command, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})  # needs no key
    assert (result.returncode, result.stderr) == (
        1,
        "plait: no session in the store matches 'nope' (see `plait sessions`)\n",
    )


def test_an_unknown_conversation_is_one_line(recorded: Cli) -> None:
    result = recorded("history", "rec", "--conversation", "nope")
    assert result.stderr == (
        "plait: session rec-1: no conversation matches 'nope' (see `plait conversations rec-1`)\n"
    )


def test_a_locked_store_is_one_line(cli: Cli, tmp_path: Path) -> None:
    cli.record("lock")
    (cli.cwd / "plait.toml").write_text("[store]\nbusy_timeout_sec = 0\n")
    holder = sqlite3.connect(cli.store, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        read = cli("sessions")  # a reader, opened read-only, waits for no writer (WAL)
        result = cli("fork", "lock-1", "--at", "3")
    finally:
        holder.close()
    assert read.returncode == 0 and read.stdout.startswith("lock-1")
    assert result.returncode == 1
    assert result.stderr == (
        f"plait: {cli.store.relative_to(cli.cwd)}: database is locked (another process holds "
        "it; [store] busy_timeout_sec says how long to wait)\n"
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    found = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices)


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert "example: plait " + command in capsys.readouterr().out


def test_every_reader_exits_1_when_a_rows_columns_disagree_with_its_bytes(cli: Cli) -> None:
    session = cli.record("col")
    assert cli("show", session).returncode == 0
    # The last row's seq moved on by 4, its bytes as written: it places its events 4 later.
    with SqliteStore(cli.store, read_only=True) as store:
        *_, (_, _, last, count, *_) = store.as_stored(session).rows
    sqlite_tamper(cli.store).set_column(session, last, "seq", last + 4)
    first = last - count + 1
    placed = f"its row places it at seq {first + 4}, its bytes at {first} (edited)"
    said = f"seq {first + 4}: {placed}"
    for reader in ("show", "log", "history", "audit", "replay"):
        done = cli(reader, session)
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            "",
            f"plait: stream {session} {said}\n",
        ), reader
    verified = cli("verify", session)
    # (verify names the first event it could not vouch for: the row's first, as it holds it)
    assert verified.returncode == 1 and verified.stdout == f"tampered: seq {first}: {placed}\n"
