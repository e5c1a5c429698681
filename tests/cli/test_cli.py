"""The ``plait`` command as a user runs it: a real subprocess in a fresh directory."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def plait(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plait", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def demo_dir(tmp_path: Path) -> Path:
    result = plait(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    return tmp_path


def session_id(cwd: Path) -> str:
    lines = plait(cwd, "sessions", "--json").stdout.splitlines()
    assert len(lines) == 1
    return str(json.loads(lines[0])["stream"])


def test_demo_runs_a_session_through_the_runtime_and_shows_its_log(tmp_path: Path) -> None:
    result = plait(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".plait" / "plait.db").exists()
    assert "(model: scripted, offline)" in result.stderr
    out = result.stdout
    streamed, shown = out.split("\nconversations\n")
    assert streamed.index("[root's task is replaced by conv_create]") < streamed.index(
        "[helper-1 running]"
    )
    assert "-> conv_list({})" in streamed
    assert streamed.rstrip().endswith("[root done]")
    assert "(root)" in shown and "(created by" in shown
    assert "The helper found 2 conversations" in shown
    assert "hash chain: 33 events, intact" in shown


def test_log_prints_every_event_and_jsonl(demo_dir: Path) -> None:
    session = session_id(demo_dir)
    text = plait(demo_dir, "log", session[:8])
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 33
    assert "SessionStarted" in text.stdout.splitlines()[0]
    lines = plait(demo_dir, "log", session, "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 34))


def test_verify_passes_then_names_the_tampered_seq(demo_dir: Path) -> None:
    session = session_id(demo_dir)
    ok = plait(demo_dir, "verify", session)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 33 events")
    with sqlite3.connect(demo_dir / ".plait" / "plait.db") as db:
        (data,) = db.execute("SELECT data FROM events WHERE seq = 7").fetchone()
        assert b"helper" in data
        db.execute(
            "UPDATE events SET data = ? WHERE seq = 7", (data.replace(b"helper", b"HELPER"),)
        )
    bad = plait(demo_dir, "verify", session)
    assert bad.returncode == 1
    assert bad.stdout.startswith("tampered: seq 7: stored bytes do not match their hash")


def test_user_errors_are_one_line_without_traceback(demo_dir: Path, tmp_path: Path) -> None:
    unknown = plait(demo_dir, "log", "no-such-session")
    assert unknown.returncode == 1
    assert (
        unknown.stderr
        == "plait: no session in the store match 'no-such-session' (see `plait sessions`)\n"
    )
    (tmp_path / "junk.db").write_text("not a database" * 200)
    junk = plait(tmp_path, "--store", "junk.db", "sessions")
    assert junk.returncode == 1 and junk.stderr.startswith(
        "plait: junk.db: not a readable plait store"
    )
    assert "Traceback" not in junk.stderr
    missing = plait(tmp_path, "--store", "nowhere.db", "sessions")
    assert missing.returncode == 1 and "no store here" in missing.stderr


def test_every_command_has_help_with_an_example(tmp_path: Path) -> None:
    for command in ["demo", "sessions", "log", "show", "verify", "replay", "audit"]:
        result = plait(tmp_path, command, "--help")
        assert result.returncode == 0 and "example: plait" in result.stdout


def test_replay_checks_a_session_then_reports_where_a_changed_program_departs(
    demo_dir: Path,
) -> None:
    session = session_id(demo_dir)
    clean = plait(demo_dir, "replay", session[:8])
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout == "replayed 33 of 33 events: no difference\n"
    changed = plait(demo_dir, "replay", session[:8], "--max-interrupt-chain-depth", "0")
    assert changed.returncode == 1
    assert changed.stdout.startswith("diverged after 9 of 33 events:")
    assert f"session {session} seq 10" in changed.stdout
    assert "expected ConversationOpened" in changed.stdout
    report = json.loads(plait(demo_dir, "replay", session, "--json").stdout)
    assert report["events"] == report["total"] == 33 and report["divergence"] is None


def test_audit_lists_the_tool_calls_and_filters_them(demo_dir: Path) -> None:
    session = session_id(demo_dir)
    table = plait(demo_dir, "audit", session)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["conv_create", "conv_list"]
    assert table.stderr == "2 calls\n"
    rows = [json.loads(x) for x in plait(demo_dir, "audit", session, "--json").stdout.splitlines()]
    assert [(r["tool"], r["outcome"]) for r in rows] == [("conv_create", "ok"), ("conv_list", "ok")]
    only = plait(demo_dir, "audit", session, "--tool", "conv_list", "--json").stdout.splitlines()
    assert len(only) == 1 and json.loads(only[0])["tool"] == "conv_list"
