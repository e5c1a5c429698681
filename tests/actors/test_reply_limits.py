"""Replies are bounded on the client: a server that never stops streaming is cut at
``max_output_tokens`` (as counted while it streams), ``max_reply_bytes`` or ``max_reply_sec``;
the task ends ``truncated``, the log records the cut, and the session replays and verifies clean
(docs/models.md#reply-limits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from scripted import call, replayed, runtime_for

from plait.actors._stream import Assembly, decode_chunk, token_limit
from plait.events import EventStore, ModelResponded, SqliteStore, TaskCompleted, ToolCallCompleted
from plait.replay import verify
from plait.testing import ScriptedModelServer, Step

ENDLESS = Step(text="and on ", chunk_chars=7, endless=True)
"""A reply that never ends: ``and on `` (7 bytes) a chunk, forever, whatever the cap."""


def run_endless(
    tmp_path: Path, options: dict[str, Any], step: Step = ENDLESS
) -> tuple[Any, ModelResponded]:
    """Run one task against a server that never stops; return its outcome and its reply's record,
    once the session replayed and verified clean."""
    with ScriptedModelServer([step]) as server, runtime_for(server, tmp_path, options) as runtime:
        session = runtime.start_session()
        outcome = session.run("talk", timeout=30)
        session.close()
        server.wait_for_disconnects(1)  # plait hung up: the stream is not read on
    events = replayed(tmp_path, session.session_id)
    store: EventStore
    with SqliteStore(tmp_path / "plait.db") as store:
        assert verify(store, session.session_id).ok
    (responded,) = [e.body for e in events if isinstance(e.body, ModelResponded)]
    (completed,) = [e.body for e in events if isinstance(e.body, TaskCompleted)]
    assert completed.cut_off == "length"
    assert responded.finish_reason == "length"
    return outcome, responded


def test_a_reply_past_max_output_tokens_is_cut_on_the_client(tmp_path: Path) -> None:
    outcome, responded = run_endless(tmp_path, {"max_output_tokens": 4})
    assert (outcome.status, outcome.ok) == ("truncated", False)
    assert responded.cut_by == "max_output_tokens"
    # One piece a chunk, so the reply holds as many chunks as the cap allows, and no more.
    assert responded.text == "and on " * token_limit(4)
    assert outcome.last_assistant_message == responded.text


def test_a_reply_past_max_reply_bytes_is_cut(tmp_path: Path) -> None:
    outcome, responded = run_endless(tmp_path, {"max_reply_bytes": 1000})
    assert outcome.status == "truncated"
    assert responded.cut_by == "max_reply_bytes"
    assert isinstance(responded.text, str)
    assert 1000 - 7 < len(responded.text.encode()) <= 1000  # all that fits, whole chunks


def test_a_reply_past_max_reply_sec_is_cut(tmp_path: Path) -> None:
    step = Step(text="and on ", endless=True, chunk_delay=0.01)
    outcome, responded = run_endless(tmp_path, {"max_reply_sec": 0.5}, step)
    assert outcome.status == "truncated"
    assert responded.cut_by == "max_reply_sec"
    assert isinstance(responded.text, str) and responded.text.startswith("and on ")


def test_calls_in_a_reply_cut_by_a_limit_are_not_run(tmp_path: Path) -> None:
    args = '{"title": "' + "x" * 2000 + '"}'
    script = [Step(tool_calls=[call("conv_create", title="x" * 2000)]), Step(text="unused")]
    limit = {"max_reply_bytes": len(args) // 2}
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path, limit) as runtime:
        session = runtime.start_session()
        assert session.run("open one", timeout=30).status == "truncated"
        session.close()
    assert len(server.requests) == 1
    events = replayed(tmp_path, session.session_id)
    (completed,) = [e.body for e in events if isinstance(e.body, ToolCallCompleted)]
    assert completed.outcome == "refused" and "max_reply_bytes" in str(completed.output)


def test_a_server_that_honours_the_cap_is_not_cut_by_the_client(tmp_path: Path) -> None:
    # The server stops at 4 * 4 characters, about a token a chunk as real servers stream.
    script = [Step(text="x" * 100, chunk_chars=4)]
    cap = {"max_output_tokens": 4}
    with ScriptedModelServer(script) as server, runtime_for(server, tmp_path, cap) as runtime:
        session = runtime.start_session()
        assert session.run("talk", timeout=30).status == "truncated"
        session.close()
    events = replayed(tmp_path, session.session_id)
    (responded,) = [e.body for e in events if isinstance(e.body, ModelResponded)]
    assert (responded.cut_by, responded.text) == (None, "x" * 16)


def chunk(content: str, completion_tokens: int | None = None) -> bytes:
    usage = (
        ""
        if completion_tokens is None
        else f', "usage": {{"completion_tokens": {completion_tokens}}}'
    )
    return f'{{"choices": [{{"delta": {{"content": "{content}"}}}}]{usage}}}'.encode()


@pytest.mark.parametrize(
    ("usage", "kept"),
    [
        (None, token_limit(10)),  # no count from the server: a chunk is a token
        (5, token_limit(10) // 5),  # the server's running count, where it streams one
    ],
)
def test_the_token_count_is_the_servers_where_it_streams_one(usage: int | None, kept: int) -> None:
    assembly = Assembly(lambda _: None, max_tokens=10)
    with pytest.raises(Exception, match="passed 10 tokens"):
        for n in range(1, 1000):
            assembly.feed(decode_chunk(chunk("ab", None if usage is None else n * usage)))
    reply = assembly.reply()
    assert (reply.cut_by, reply.finish_reason, reply.text) == (
        "max_output_tokens",
        "length",
        "ab" * kept,
    )
