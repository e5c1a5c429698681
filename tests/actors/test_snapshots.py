"""What a ``SessionHandle`` returns is a snapshot the caller owns, safe to read on any thread."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

from scripted import call, runtime_for

from plait.testing import ScriptedModelServer, Step


def test_indexes_histories_and_stats_do_not_change_after_they_are_returned(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    server.push(
        Step(tool_calls=[call("conv_create", user_instruction="count to two")]),
        Step(text="one, two"),
        Step(text="the helper counted"),
        Step(text="second answer"),
    )
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        assert session.run("delegate", timeout=30).ok
        index, history, stats = session.conversations(), session.history(), session.stats()
        kept = copy.deepcopy((index, history, stats))

        history.append({"role": "user", "content": "written by the caller"})
        history[0]["content"] = "edited by the caller"
        assert session.history() == kept[1]  # the session's own history is untouched

        history.pop()
        history[0]["content"] = kept[1][0]["content"]
        assert session.run("and again", timeout=30).ok  # the session changes...
        assert (index, history, stats) == kept  # ...what was returned does not
        root = session.root_conversation_id
        now = {info.id: info for info in session.conversations()}
        assert now[root].message_count == len(session.history()) > len(history)
        assert session.stats()[root].tasks > stats[root].tasks


def test_readers_on_other_threads_see_whole_states_while_the_session_runs(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    tasks = 20
    server.push(*(Step(text=f"answer {i}", chunk_chars=3) for i in range(tasks)))
    with runtime_for(server, tmp_path) as runtime:
        session = runtime.start_session()
        root = session.root_conversation_id
        done = threading.Event()
        seen: list[list[int]] = [[] for _ in range(4)]
        errors: list[BaseException] = []

        def read(lengths: list[int]) -> None:
            try:
                while not done.is_set():
                    history: list[dict[str, Any]] = session.history()
                    # Whole messages, in order: users and assistants alternate from the start.
                    roles = [m["role"] for m in history]
                    assert roles == ["user", "assistant"] * (len(roles) // 2) + (
                        ["user"] if len(roles) % 2 else []
                    )
                    [info] = session.conversations()
                    assert info.id == root and info.message_count >= len(history)
                    lengths.append(len(history))
            except BaseException as exc:  # reported to the test's thread
                errors.append(exc)

        readers = [threading.Thread(target=read, args=(lengths,)) for lengths in seen]
        for reader in readers:
            reader.start()
        try:
            for i in range(tasks):
                assert session.run(f"question {i}", timeout=30).ok
        finally:
            done.set()
            for reader in readers:
                reader.join(timeout=30)
        assert errors == []
        for lengths in seen:
            assert lengths == sorted(lengths)  # a reader never sees the history shrink
        assert len(session.history()) == 2 * tasks
