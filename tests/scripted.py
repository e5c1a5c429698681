"""Test support for the runtime: a runtime on a scripted model, and checks on its events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plait.actors.model import ModelSettings
from plait.events import Event
from plait.events.projections import HistoryProjection
from plait.runtime import Runtime
from plait.testing import ScriptedModelServer, ScriptedToolCall


def runtime_for(server: ScriptedModelServer, tmp_path: Path, **kwargs: Any) -> Runtime:
    settings = ModelSettings(
        base_url=server.base_url, api_key="test", model="scripted-model", backoff_sec=0.01
    )
    return Runtime(tmp_path / "plait.db", model=settings, workdir=tmp_path, **kwargs)


def kinds(events: list[Event], conversation: str) -> list[str]:
    return [type(e.body).__name__ for e in events if e.conversation_id == conversation]


def call(name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(name, json.dumps(arguments))


def assert_histories_valid(events: list[Event]) -> None:
    state = HistoryProjection().fold(events)
    assert state.anomalies == []
    for conv in state.conversations.values():
        open_calls: list[str] = []
        for message in conv.messages:
            if message.role == "tool":
                open_calls.remove(message.tool_call_id or "")
            else:
                assert open_calls == []
                open_calls = [c.id for c in message.tool_calls or ()]
