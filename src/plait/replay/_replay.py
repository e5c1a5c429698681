"""Deterministic replay: run a recorded session's program again, offline, and compare.

``replay`` configures the program as the session recorded it and hands it to the ``Driver``
(``_driver.py``), which feeds in what came from outside (``_inference.py``) and compares each
event the program produces (``_compare.py``). No network, no API key, no MCP server is needed.

Time comes from the log too: the replay's store stamps event n with the time event n was
recorded, so whatever the program derives from it (``last_active_at``...) is the same. Not
compared: the measured ``duration_ms`` of a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from plait._errors import (
    ContentUnavailableError,
    DivergenceError,
    UnknownSessionError,
)
from plait.events import EventStore, RecordedSettings, SessionStarted, missing_content
from plait.replay._compare import Divergence, ReplayResult

if TYPE_CHECKING:
    from plait.actors import McpLimits
    from plait.actors.mcp import FunctionTool

__all__ = ["Divergence", "ReplayResult", "replay"]


def replay(
    store: EventStore,
    session_id: str,
    *,
    timeout: float = 10.0,
    raise_on_divergence: bool = False,
    max_interrupt_chain_depth: int | None = None,
    mcp_limits: McpLimits | None = None,
    tools: Iterable[FunctionTool | Callable[..., Any]] | None = None,
) -> ReplayResult:
    """Replay ``session_id`` from ``store`` and compare every event it produces.

    The program is configured as the session's ``SessionStarted.settings`` recorded, and
    each run of the session offers the MCP servers the log says it had; a given
    ``max_interrupt_chain_depth`` or ``mcp_limits`` overrides it, to see how a changed program
    would have run, or to supply what older logs did not record. Given ``tools``, the
    program's function tools are offered as they are now, not as recorded (a changed one
    diverges where the session recorded them); they are never called. The replay reads
    nothing but the log: ids, instruction files, model replies and tool results come from it.
    ``timeout`` bounds the wait for each event the program should produce. With
    ``raise_on_divergence`` a difference raises ``DivergenceError`` (its ``divergence``
    attribute holds the report) instead of being returned.
    """
    # Here, not at the top: the driver brings the runtime, the actors and asyncio (~60 ms),
    # which `plait audit`, `fork` and `verify` do without, importing this package.
    from plait.actors import McpLimits
    from plait.actors.mcp import as_tools
    from plait.replay._driver import Driver, Program

    recorded = store.read(session_id)
    if not recorded or not isinstance(recorded[0].body, SessionStarted):
        raise UnknownSessionError(session_id)
    missing = missing_content(recorded)
    if missing:
        raise ContentUnavailableError(session_id, "replay", missing)
    started = recorded[0].body
    assert isinstance(started, SessionStarted)
    kept = started.settings or RecordedSettings()
    if mcp_limits is None and started.settings is not None:
        mcp_limits = McpLimits(
            kept.mcp_per_session,
            kept.mcp_per_conversation,
            kept.mcp_per_conversation_rate,
            kept.mcp_rate_window_sec,
        )
    program = Program(
        kept.max_interrupt_chain_depth
        if max_interrupt_chain_depth is None
        else max_interrupt_chain_depth,
        mcp_limits,
        kept.history,
        None if tools is None else [t.snapshot() for t in as_tools(tools)],
    )
    result = Driver(recorded, timeout, program).run()
    if raise_on_divergence and result.divergence is not None:
        error = DivergenceError(result.divergence.message())
        error.divergence = result.divergence  # type: ignore[attr-defined]
        raise error
    return result
