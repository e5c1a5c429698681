"""The read commands' ``--json`` speaks the user's words: ``session_id``, never ``stream``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conftest import Cli


def rows(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_show_json_summarises_the_session(recorded: Cli) -> None:
    result = recorded("show", "rec", "--json")
    assert result.returncode == 0, result.stderr
    (summary,) = rows(result.stdout)
    assert (summary["session_id"], summary["model"], summary["state"]) == (
        "rec-1",
        "scripted-model",
        "closed",
    )
    assert summary["root_conversation_id"] == "rec-2"
    conversations = {c["conversation_id"]: c for c in summary["conversations"]}
    assert conversations["rec-2"]["parent_id"] is None
    [helper] = [c for c in conversations.values() if c["parent_id"] == "rec-2"]
    assert helper["message_count"] == 2 and helper["destroyed_at"] is None
    # "How many?" is replaced by conv_create; the helper's task and the continuation
    # complete; then "Sure?".
    assert summary["tasks"] == {"total": 4, "replaced": 1, "completed": 3}
    assert summary["tool_calls"] == {"total": 1, "ok": 1}
    assert summary["tokens"]["total_tokens"] > 0
    assert summary["plans"] == {}
    assert summary["chain"] == {
        "ok": True,
        "events": summary["events"],
        "first_bad_seq": None,
        "reason": "",
    }


def test_no_read_command_calls_the_session_id_stream(recorded: Cli) -> None:
    (session,) = rows(recorded("sessions", "--json").stdout)
    assert session["session_id"] == "rec-1" and "stream" not in session
    (report,) = rows(recorded("verify", "rec", "--json").stdout)
    assert report["session_id"] == "rec-1" and "stream" not in report
    (call,) = rows(recorded("audit", "rec", "--json").stdout)
    assert call["session_id"] == "rec-1" and "stream" not in call
    assert call["tool"] == "conv_create"
    (replayed,) = rows(recorded("replay", "rec", "--json").stdout)
    assert replayed["session_id"] == "rec-1"
