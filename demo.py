"""The offline demo: a real session run by the runtime against a scripted model.

A ``ScriptedModelServer`` stands in for the model (real HTTP, the real ``openai`` SDK, no key,
no network). The root conversation hands work to a helper with ``conv_create``; the helper
calls a tool (``conv_list``); the root continues with the helper's answer. The demo streams the
session as it happens, then prints what the log holds: conversations, histories, the tool-call
audit, token usage and the hash-chain check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO

from plait.actors.model import ModelSettings
from plait.events.types import (
    AgentMessageDelta,
    ConversationOpened,
    Event,
    TaskCompleted,
    TaskStarted,
    ToolCallCompleted,
    ToolCallRequested,
    Transient,
    TurnAborted,
)
from plait.runtime import Runtime, TaskOutcome
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

__all__ = ["QUESTION", "demo_script", "run_demo"]

QUESTION = "Plan a tiny release: ask a helper conversation to check what conversations exist."
HELPER_TASK = "List this session's conversations and report how many there are."


def demo_script() -> list[Step]:
    """The scripted model's answers, in the order the session asks for them."""
    create = {"user_instruction": HELPER_TASK, "base_instruction_text": "You are a careful helper."}
    return [
        Step(
            text="I'll hand the check to a helper conversation.",
            tool_calls=[ScriptedToolCall("conv_create", json.dumps(create), id="call_create")],
            chunk_delay=0.01,
        ),
        Step(tool_calls=[ScriptedToolCall("conv_list", "{}", id="call_list")]),
        Step(text="There are 2 conversations: the root and me.", chunk_delay=0.01),
        Step(
            text="The helper found 2 conversations, so the release plan has one reviewer.",
            chunk_delay=0.01,
        ),
    ]


def run_demo(store: str, out: TextIO, err: TextIO) -> tuple[str, TaskOutcome]:
    """Run the demo session in ``store``, streaming it to ``out``; return its id and outcome."""
    with ScriptedModelServer(demo_script()) as server:
        settings = ModelSettings(
            base_url=server.base_url, api_key="offline-demo", model="scripted-model"
        )
        with Runtime(store, model=settings) as runtime:
            session = runtime.start_session(base_instructions="You are the demo's root agent.")
            print(f"session {session.session_id} (model: scripted, offline)", file=err)
            printer = _Printer(session.root_conversation_id, out)
            print(f"\nuser: {QUESTION}", file=out)
            outcome = session.run(QUESTION, timeout=60, on_item=printer)
            print("", file=out)
            return session.session_id, outcome


class _Printer:
    """Renders the live feed: text as it streams, tools, and which conversation runs."""

    def __init__(self, root: str, out: TextIO) -> None:
        self.root = root
        self.out = out
        self.names: dict[str, str] = {root: "root"}
        self.speaking: str | None = None

    def __call__(self, item: Event | Transient) -> None:
        write: Callable[[str], Any] = self.out.write
        if isinstance(item, AgentMessageDelta):
            if self.speaking != item.conversation_id:
                write(f"\n{self._name(item.conversation_id)}: ")
                self.speaking = item.conversation_id
            write(item.text)
            self.out.flush()
            return
        if not isinstance(item, Event):
            return
        body, conv = item.body, item.conversation_id
        line = None
        if isinstance(body, ConversationOpened) and conv is not None and conv != self.root:
            self.names[conv] = f"helper-{len(self.names)}"
            line = f"[{self._name(conv)} opened by {self._name(body.parent_id)}]"
        elif isinstance(body, TurnAborted) and body.reason == "replaced":
            line = f"[{self._name(conv)}'s task is replaced by {body.detail.split(' ')[0]}]"
        elif isinstance(body, TaskStarted):
            line = f"[{self._name(conv)} running]"
        elif isinstance(body, ToolCallRequested):
            line = f"  -> {body.tool}({body.arguments})"
        elif isinstance(body, ToolCallCompleted):
            line = f"  <- {body.outcome}: {body.output}"
        elif isinstance(body, TaskCompleted):
            line = f"[{self._name(conv)} done]"
        if line is not None:
            write(f"\n{line}")
            self.speaking = None

    def _name(self, conv: str | None) -> str:
        return self.names.get(conv or "", (conv or "?")[:8])
