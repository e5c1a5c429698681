"""The baseline of ``storage.py``: openai-agents' ``SQLiteSession`` recording the same turns.

Run by ``storage.py`` with the Python of openai-agents' own virtualenv (it does not import
plait). It reads one JSON line per session from stdin: ``{"db", "session_id", "base_url",
"prompts", "output"}``; for each prompt it runs ``Runner.run(agent, prompt, session=session)``
with an ``Agent`` whose model is ``OpenAIChatCompletionsModel`` on the given base URL (the
bench's ``ScriptedModelServer``), then prints one JSON line: ``{"items": N}``.
The agent's function tools are the bench's: ``lookup`` (a short answer) and ``read_log``
(returns ``output``, the same large text every call).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


async def run_session(spec: dict[str, Any]) -> int:
    """Run the spec's prompts in one session; return how many items the session holds."""
    output = spec["output"]

    @function_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        return f"Sunny in {city}, 21 degrees."

    @function_tool
    def read_log() -> str:
        """Read the build log."""
        return str(output)

    client = AsyncOpenAI(base_url=spec["base_url"], api_key="x", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted-model", openai_client=client)
    agent = Agent(
        name="assistant", instructions="Answer briefly.", model=model, tools=[lookup, read_log]
    )
    session = SQLiteSession(spec["session_id"], spec["db"])
    try:
        for prompt in spec["prompts"]:
            await Runner.run(agent, prompt, session=session)
        return len(await session.get_items())
    finally:
        session.close()
        await client.close()


def main() -> None:
    set_tracing_disabled(True)
    for line in sys.stdin:
        print(json.dumps({"items": asyncio.run(run_session(json.loads(line)))}), flush=True)


if __name__ == "__main__":
    main()
