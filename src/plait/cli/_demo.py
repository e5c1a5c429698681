"""The offline demo: a real session run by the runtime against a scripted model.

A ``ScriptedModelServer`` stands in for the model (real HTTP, the real ``openai`` SDK, no key,
no network), and ``plait.cli._demo_tools`` is a real MCP server over stdio. The root
conversation hands work to a helper with ``conv_create``; the helper calls the MCP tool
``release__pending_changes``; the root continues with the helper's answer. The demo streams
the session as it happens, then prints what the log holds: conversations, histories, the
tool-call audit, token usage, the hash-chain check, and a replay of the session from its log.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, TextIO

from plait.actors import ModelSettings
from plait.actors.mcp import McpServerConfig
from plait.cli._live import LivePrinter
from plait.runtime import Runtime, RuntimeSettings, TaskOutcome
from plait.telemetry import TelemetrySettings
from plait.testing import ScriptedModelServer, ScriptedToolCall, Step

if TYPE_CHECKING:
    from plait.events import Signer

__all__ = ["QUESTION", "SERVERS", "demo_script", "replay_check", "run_demo"]

QUESTION = "Plan a tiny release: ask a helper conversation what changes are pending."
HELPER_TASK = "List the pending changes with the release tool and count them."
SERVERS = {"release": McpServerConfig(command=sys.executable, args=["-m", "plait.cli._demo_tools"])}
"""The demo's MCP server, started by the session like any configured server."""


def demo_script() -> list[Step]:
    """The scripted model's answers, in the order the session asks for them."""
    create = {"user_instruction": HELPER_TASK, "base_instruction_text": "You are a careful helper."}
    return [
        Step(
            text="I'll hand the check to a helper conversation.",
            tool_calls=[ScriptedToolCall("conv_create", json.dumps(create), id="call_create")],
            chunk_delay=0.01,
        ),
        Step(tool_calls=[ScriptedToolCall("release__pending_changes", "{}", id="call_changes")]),
        Step(text="3 changes are pending.", chunk_delay=0.01),
        Step(
            text="The helper found 3 pending changes, so the release ships all three.",
            chunk_delay=0.01,
        ),
    ]


def run_demo(
    store: str,
    out: TextIO,
    err: TextIO,
    signer: Signer | None = None,
    telemetry: TelemetrySettings | None = None,
) -> tuple[str, TaskOutcome]:
    """Run the demo session in ``store``, streaming it to ``out``; return its id and outcome.
    With ``signer`` (``[audit] signing_key``), its heads are signed; with ``telemetry``
    (``[telemetry]``, the ``OTEL_*`` variables), its spans are exported as it runs."""
    with ScriptedModelServer(demo_script()) as server:
        model = ModelSettings(
            base_url=server.base_url, api_key="offline-demo", model="scripted-model"
        )
        settings = RuntimeSettings(
            model=model,
            mcp_servers=SERVERS,
            signer=signer,
            telemetry=telemetry or TelemetrySettings(),
        )
        with Runtime(store, settings) as runtime:
            session = runtime.start_session(base_instructions="You are the demo's root agent.")
            print(f"session {session.session_id} (model: scripted, offline)", file=err)
            printer = LivePrinter(session.root_conversation_id, out)
            print(f"\nuser: {QUESTION}", file=out)
            outcome = session.run(QUESTION, timeout=60, on_item=printer)
            print("", file=out)
            return session.session_id, outcome


def replay_check(store: str, session_id: str, out: TextIO) -> bool:
    """Replay the session from its log (no model server, no MCP server) and say whether the
    program made every event again; return that."""
    from plait.events.stores import open_store
    from plait.replay import replay

    with open_store(store) as opened:
        result = replay(opened, session_id, timeout=10)
    if result.divergence is None:
        print(
            f"\nreplay: {result.events} of {result.total} events made again, no difference",
            file=out,
        )
    else:
        print(f"\nreplay diverged: {result.divergence.message()}", file=out)
    return result.ok
