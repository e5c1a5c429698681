"""The ``plait`` command as a user runs it: a real subprocess in a fresh directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from support import sqlite_tamper

from plait.events import SqliteStore
from plait.events import _packing as packing


def plait(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plait", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def demo_dir(demo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    """Where `plait demo` ran, once for the test process (conftest.py); tests only read it."""
    return demo_run[0]


def session_id(cwd: Path) -> str:
    lines = plait(cwd, "sessions", "--json").stdout.splitlines()
    assert len(lines) == 1
    return str(json.loads(lines[0])["session_id"])


def test_demo_runs_a_session_through_the_runtime_and_shows_its_log(
    demo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    cwd, result = demo_run
    assert (cwd / ".plait" / "plait.db").exists()
    assert "(model: scripted, offline)" in result.stderr
    out = result.stdout
    streamed, shown = out.split("\nconversations\n")
    assert streamed.index("[root's task is replaced by conv_create]") < streamed.index(
        "[helper-1 running]"
    )
    # The helper calls the bundled MCP server's tool, and the root goes on with its answer.
    assert "-> release__pending_changes({})" in streamed
    assert "<- ok: - storage policies" in streamed
    assert streamed.rstrip().endswith("[root done]")
    assert "(root)" in shown and "(created by" in shown
    assert "The helper found 3 pending changes" in shown
    assert "hash chain: 35 events, intact" in shown
    assert "replay: 35 of 35 events made again, no difference" in shown


def test_log_prints_every_event_and_jsonl(demo_dir: Path) -> None:
    session = session_id(demo_dir)
    text = plait(demo_dir, "log", session[:8])
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 35
    assert "SessionStarted" in text.stdout.splitlines()[0]
    lines = plait(demo_dir, "log", session, "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 36))


def test_verify_passes_then_names_the_tampered_seq(demo_dir: Path, tmp_path: Path) -> None:
    session = session_id(demo_dir)
    ok = plait(demo_dir, "verify", session)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 35 events")
    shutil.copytree(demo_dir / ".plait", tmp_path / ".plait")  # the others read the original
    copy = tmp_path / ".plait" / "plait.db"
    with SqliteStore(copy, read_only=True) as store:
        events = store.read(session, resolve_blobs=False)
        rows = store.as_stored(session).rows  # a row per append
    # The first event that names the tool, the model's call: its entry, edited.
    event = next(e for e in events if b"conv_create" in msgspec.msgpack.encode(e.body))
    entry = packing.encode_entry(
        packing.Entry(
            event.seq, event.at, event.v, event.body, event.conversation_id, event.task_id
        )
    )
    seq = event.seq
    sqlite_tamper(copy).set_data(session, seq, entry.replace(b"conv_create", b"conv_CREATE"))
    bad = plait(tmp_path, "verify", session)
    assert bad.returncode == 1
    # The row's hash is its last event's: an edit is found at the row's first.
    first = next(last - count + 1 for _, _, last, count, *_ in rows if last >= seq)
    assert bad.stdout.startswith(f"tampered: seq {first}: stored bytes do not match the row's hash")


def test_user_errors_are_one_line_without_traceback(demo_dir: Path, tmp_path: Path) -> None:
    unknown = plait(demo_dir, "log", "no-such-session")
    assert unknown.returncode == 1
    assert (
        unknown.stderr
        == "plait: no session in the store matches 'no-such-session' (see `plait sessions`)\n"
    )
    (tmp_path / "junk.db").write_text("not a database" * 200)
    junk = plait(tmp_path, "--store", "junk.db", "sessions")
    assert junk.returncode == 1 and junk.stderr.startswith(
        "plait: junk.db: not a readable plait store"
    )
    assert "Traceback" not in junk.stderr
    missing = plait(tmp_path, "--store", "nowhere.db", "sessions")
    assert missing.returncode == 1 and "no store here" in missing.stderr


def test_replay_checks_a_session_then_reports_where_a_changed_program_departs(
    demo_dir: Path,
) -> None:
    session = session_id(demo_dir)
    clean = plait(demo_dir, "replay", session[:8])
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout == "replayed 35 of 35 events: no difference\n"
    changed = plait(demo_dir, "replay", session[:8], "--max-interrupt-chain-depth", "0")
    assert changed.returncode == 1
    assert changed.stdout.startswith("diverged after 10 of 35 events:")
    assert f"session {session} seq 11" in changed.stdout
    assert "expected ConversationOpened" in changed.stdout
    report = json.loads(plait(demo_dir, "replay", session, "--json").stdout)
    assert report["events"] == report["total"] == 35 and report["divergence"] is None


def test_audit_lists_the_tool_calls_and_filters_them(demo_dir: Path) -> None:
    session = session_id(demo_dir)
    table = plait(demo_dir, "audit", session)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["conv_create", "release__pending_changes"]
    assert table.stderr == "2 calls; 0 model errors\n"
    rows = [json.loads(x) for x in plait(demo_dir, "audit", session, "--json").stdout.splitlines()]
    assert [(r["tool"], r["outcome"]) for r in rows] == [
        ("conv_create", "ok"),
        ("release__pending_changes", "ok"),
    ]
    only = plait(demo_dir, "audit", session, "--tool", "release__", "--json").stdout.splitlines()
    assert len(only) == 1 and json.loads(only[0])["server"] == "release"
