"""``plait prune`` (docs/storage.md#retention): the real command on both durable stores, and
what the other commands say of a pruned session afterwards."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from scripted import record_session
from support import StoreFactory

from plait.cli._flags import since
from plait.testing import Step

if TYPE_CHECKING:
    from conftest import Cli

RULE = "closed-before 2026-06-01T00:00:00+00:00"
"""The rule the tests prune by: every session they record closes in January 2026."""


def test_prune_removes_closed_sessions_and_every_command_says_what_became_of_them(
    cli: Cli, durable_stores: StoreFactory
) -> None:
    store = durable_stores.open()
    one = record_session(store, [Step(text="Hi.")], ["Hello."], "one")
    two = record_session(store, [Step(text="Hi.")], ["Hello."], "two")
    three = record_session(store, [Step(text="Hi.")], ["Hello."], "three")
    sizes = {s: store.last_seq(s) for s in (one, two, three)}
    # Where positions are dense (SQLite), the session holding the last one stays until another
    # writes; PostgreSQL's never come back, so it goes with the others (docs/storage.md).
    stays = [three] if store.dense_positions else []
    goes = [s for s in (one, two, three) if s not in stays]
    store.close()
    where = ("--store", durable_stores.url)

    dry = cli(*where, "prune", "--closed-before", "2026-06-01", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert [line.split()[:3] for line in lines[: len(goes)]] == [
        ["would", "prune", s[:8]] for s in goes
    ]
    assert f"{sizes[one]} events" in lines[0]
    for line in lines[len(goes) : len(goes) + len(stays)]:
        assert line.startswith(f"kept {three[:8]}: it holds the store's last position")
    summary = lines[len(goes) + len(stays)]
    assert summary.startswith(f"would prune {len(goes)} sessions")
    assert lines[-1] == "dry run: nothing changed"
    assert cli(*where, "log", one).returncode == 0

    done = cli(*where, "prune", "--closed-before", "2026-06-01")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[: len(goes)]] == [["pruned", s[:8]] for s in goes]
    events = sum(sizes[s] for s in goes)
    summary = lines[len(goes) + len(stays)]
    assert summary.startswith(f"pruned {len(goes)} sessions ({events} events")
    assert summary.endswith(f"by {RULE}")
    assert lines[len(goes) + len(stays) + 1].startswith("store: ")

    log = cli(*where, "log", one[:6])
    assert log.returncode == 1 and log.stdout == ""
    assert log.stderr.startswith(f"plait: session {one} was pruned at ")
    assert f"({RULE}): {sizes[one]} events removed; its head was seq {sizes[one]}" in log.stderr
    assert len(log.stderr.splitlines()) == 1

    gone = cli(*where, "verify", one)
    assert gone.returncode == 0 and gone.stdout.startswith(f"pruned: session {one} was pruned")
    if stays:
        kept = cli(*where, "verify", three)
        assert kept.returncode == 0, kept.stdout
        assert kept.stdout.rstrip().endswith(
            f"; 2 sessions pruned ({events} events), accounted for"
        )
    for command in ("sessions", "du", *(["audit"] if stays else [])):
        ran = cli(*where, command, *([three] if command == "audit" else []))
        assert ran.returncode == 0, ran.stderr
        assert one[:8] not in ran.stdout
    listed = cli(*where, "sessions", "--json")
    assert [json.loads(line)["session_id"] for line in listed.stdout.splitlines()] == stays

    again = cli(*where, "prune", "--closed-before", "2026-06-01", "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["pruned"], report["dry_run"], report["rule"]) == ([], False, RULE)
    assert [k["session_id"] for k in report["kept"]] == stays


def test_prune_says_what_it_needs_on_one_line(cli: Cli, durable_stores: StoreFactory) -> None:
    record_session(durable_stores.open(), [Step(text="Hi.")], ["Hello."], "one")
    where = ("--store", durable_stores.url)
    bare = cli(*where, "prune")
    assert bare.returncode == 2 and bare.stdout == ""
    assert bare.stderr == (
        "plait: prune: name what goes: --closed-before DATE, --idle-before DATE, or both\n"
    )
    wrong = cli(*where, "prune", "--idle-before", "last tuesday")
    assert wrong.returncode == 2 and "'last tuesday': not a time" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    missing = cli(
        "--store", str(durable_stores.path.with_name("none.db")), "prune", "--idle-before", "1d"
    )
    if durable_stores.backend == "sqlite":
        assert missing.returncode == 1 and missing.stderr.count("\n") == 1
        assert "no store here" in missing.stderr


def test_a_date_is_iso_in_utc_or_a_duration_ago() -> None:
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)  # --closed-before takes what --since takes
    assert since("2026-01-01") == datetime(2026, 1, 1, tzinfo=UTC)
    assert since("2026-01-01T06:00+02:00") == datetime(2026, 1, 1, 4, tzinfo=UTC)
    assert since("30d", now) == datetime(2026, 1, 30, 12, tzinfo=UTC)
    assert since("12h", now) == datetime(2026, 3, 1, tzinfo=UTC)
    with pytest.raises(argparse.ArgumentTypeError, match="not a time"):
        since("soon")
