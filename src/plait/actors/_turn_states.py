"""The states of a conversation's turn and of each call of its tool batch, and their moves.

A running task's ``Turn`` is in exactly one ``Phase``; the calls of a reply each in one
``CallState``, since a call waiting for its approval and another running on its server overlap.
Only the named transitions of ``TRANSITIONS`` and ``CALL_TRANSITIONS`` move them
(``plait._machines.moved``), and a move from a state it does not leave is an
``IllegalTransitionError``. A stop asked mid-turn is not a
phase: it is a flag the turn carries into the phase it is in, which ends the task at its next
checkpoint (docs/interrupts.md#stopping-at-a-checkpoint). docs/conversations.md#a-turns-states
draws both tables (``diagram()``; a test holds them equal).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from plait._machines import drawn

__all__ = [
    "CALL_TRANSITIONS",
    "TRANSITIONS",
    "CallState",
    "Checkpoint",
    "Phase",
    "call_diagram",
    "diagram",
]


class Phase(enum.Enum):
    """Where a running task's turn is."""

    PROMPTING = "prompting"
    """Building the turn's prompt: trimming the history, deciding on a compaction."""
    AWAITING_SERVERS = "awaiting_servers"
    """The MCP servers the turn offers tools of are still starting (``ServersSettled`` goes on)."""
    COMPACTING = "compacting"
    """A compaction's request is out: its summary replaces the older history."""
    AWAITING_MODEL = "awaiting_model"
    """The turn's request is out (``ModelFinished`` goes on)."""
    RUNNING_TOOLS = "running_tools"
    """The reply's tool calls run, each in its ``CallState``."""
    ENDED = "ended"
    """The task ended: completed, cut off, aborted or replaced."""


_LIVE = (
    Phase.PROMPTING,
    Phase.AWAITING_SERVERS,
    Phase.COMPACTING,
    Phase.AWAITING_MODEL,
    Phase.RUNNING_TOOLS,
)

TRANSITIONS: Mapping[str, Mapping[Phase, Phase]] = {
    "wait_for_servers": {Phase.PROMPTING: Phase.AWAITING_SERVERS},
    "servers_settled": {Phase.AWAITING_SERVERS: Phase.PROMPTING},
    "compact": {Phase.PROMPTING: Phase.COMPACTING},
    "summarised": {Phase.COMPACTING: Phase.PROMPTING},
    "request": {Phase.PROMPTING: Phase.AWAITING_MODEL},
    "reply_with_calls": {Phase.AWAITING_MODEL: Phase.RUNNING_TOOLS},
    "calls_answered": {Phase.RUNNING_TOOLS: Phase.PROMPTING},
    "complete": {
        Phase.PROMPTING: Phase.ENDED,  # a task that only changes the context
        Phase.COMPACTING: Phase.ENDED,  # a compaction asked for (``plait compact``)
        Phase.AWAITING_MODEL: Phase.ENDED,
    },
    "replace": {Phase.RUNNING_TOOLS: Phase.ENDED},  # by conv_create or conv_send
    "abort": {phase: Phase.ENDED for phase in _LIVE},
}
"""Each transition of a turn by name: the phases it leaves, and where each goes."""


class CallState(enum.Enum):
    """Where one call of a turn's tool batch is."""

    WAITING = "waiting"
    """Not started: it waits for the calls before it (a batch that is not all read-only)."""
    ASKING = "asking"
    """Its approval is asked for (``ApprovalFinished`` goes on)."""
    RUNNING = "running"
    """Sent to its MCP server (``ToolFinished`` goes on)."""
    ANSWERED = "answered"
    """Its result is held until the calls before it are recorded (the model's order)."""
    RECORDED = "recorded"
    """Its ``ToolCallCompleted`` is recorded."""


CALL_TRANSITIONS: Mapping[str, Mapping[CallState, CallState]] = {
    "ask": {CallState.WAITING: CallState.ASKING},
    "send": {CallState.WAITING: CallState.RUNNING, CallState.ASKING: CallState.RUNNING},
    "answer": {
        CallState.WAITING: CallState.ANSWERED,  # a built-in, or a call refused at once
        CallState.ASKING: CallState.ANSWERED,  # denied
        CallState.RUNNING: CallState.ANSWERED,
    },
    "record": {CallState.ANSWERED: CallState.RECORDED},
}
"""Each transition of a call by name: the states it leaves, and where each goes."""


class Checkpoint(enum.IntEnum):
    """Where an interrupt finds the turn; recorded as ``TurnAborted.checkpoint``
    (docs/interrupts.md#checkpoints)."""

    NONE = 0
    """Anything else (a model request in flight, or not an interrupt): each unanswered call
    gets ``aborted: <reason>``."""
    REPLY_RECORDED = 1
    """The reply is recorded and no call has begun: each call is answered with
    ``CANCEL_MESSAGE``, and ``INTERRUPT_MESSAGE`` follows."""
    CALLS_ANSWERED = 2
    """Every call of the last reply is answered and the next request is not out:
    ``INTERRUPT_TEXT`` is added to the last tool output."""
    CALL_NOT_BEGUN = 3
    """Some calls are answered and the next one has not begun (it waits for its approval, or
    its turn): each unanswered call gets ``CANCEL_MESSAGE``."""
    CALL_RUNNING = 4
    """A call is running: each unanswered call gets ``CANCEL_MESSAGE``."""


def diagram() -> str:
    """The turn's transitions as a Mermaid state diagram (docs/conversations.md#a-turns-states)."""
    return drawn(TRANSITIONS, Phase.PROMPTING, Phase.ENDED)


def call_diagram() -> str:
    """A call's transitions as a Mermaid state diagram (docs/conversations.md#a-turns-states)."""
    return drawn(CALL_TRANSITIONS, CallState.WAITING, CallState.RECORDED)


if __name__ == "__main__":
    print(diagram(), call_diagram(), sep="\n\n")
