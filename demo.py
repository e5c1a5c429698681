"""The offline demo: a real session run by the runtime against a scripted model.

A ``ScriptedModelServer`` stands in for the model (real HTTP, the real ``openai`` SDK, no key,
no network). The root conversation hands work to a helper with ``conv_create``; the helper
calls a tool (``conv_list``); the root continues with the helper's answer. The demo streams the
session as it happens, then prints what the log holds: conversations, histories, the tool-call
audit, token usage and the hash-chain check.
"""

from __future__ import annotations

import json
from typing import TextIO

from plait.actors.model import ModelSettings
from plait.live import LivePrinter
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
            printer = LivePrinter(session.root_conversation_id, out)
            print(f"\nuser: {QUESTION}", file=out)
            outcome = session.run(QUESTION, timeout=60, on_item=printer)
            print("", file=out)
            return session.session_id, outcome
