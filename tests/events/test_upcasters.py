"""Bodies written before causes were recorded read with the cause their text implied."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from plait.events import Event, TaskDropped, ToolCallCompleted, TurnAborted, decode_event

CRASH_ANSWER = (
    "result unknown: the process stopped while this call ran; it may or may not have "
    "taken effect, check before running it again"
)


def v1(body: dict[str, Any]) -> Any:
    """Decode ``body`` as an event of version 1, as an older plait stored it."""
    at = "2026-01-01T00:00:00Z"
    raw = {"stream": "s", "seq": 3, "at": at, "prev_hash": bytes(32), "v": 1, "body": body}
    event = decode_event(msgspec.msgpack.encode(raw), stream="s", seq=3)
    assert isinstance(event, Event) and event.v == type(event.body).VERSION
    return event.body


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ({"reason": "interrupted", "detail": "interrupted by the user"}, "user"),
        ({"reason": "interrupted", "detail": "conversation destroyed"}, "destroy"),
        (
            {
                "reason": "interrupted",
                "detail": "force-aborted: the task did not stop within 2 s of the close",
            },
            "forced_close",
        ),
        ({"reason": "replaced", "detail": "conv_create -> c2"}, "replaced"),
        ({"reason": "crashed", "detail": "the process stopped while the task ran"}, "crash"),
        ({"reason": "failed", "detail": "HTTP 500", "model_error": "unavailable"}, "model"),
        ({"reason": "failed", "detail": "connection reset"}, "model"),
        ({"reason": "failed", "detail": "internal error: KeyError('x')"}, "error"),
        ({"reason": "failed", "detail": "context change refused: unknown tool"}, "error"),
    ],
)
def test_turn_aborted_v1_gets_the_cause_its_text_implied(body: dict[str, Any], cause: str) -> None:
    lifted = v1({"type": "TurnAborted", **body})
    assert isinstance(lifted, TurnAborted)
    assert (lifted.reason, lifted.cause, lifted.detail) == (body["reason"], cause, body["detail"])


@pytest.mark.parametrize(
    ("reason", "cause"),
    [("interrupted by the user", "user"), ("conversation destroyed", "destroy")],
)
def test_task_dropped_v1_gets_its_cause(reason: str, cause: str) -> None:
    lifted = v1({"type": "TaskDropped", "reason": reason})
    assert lifted == TaskDropped(reason, cause)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("output", "outcome", "aborted_by"),
    [
        (CRASH_ANSWER, "unknown", "crash"),
        ("not run: its approval was denied", "refused", "crash"),
        ("aborted: interrupted", "error", "user"),
        ("aborted: replaced", "error", "replaced"),
        ("42 files changed", "ok", None),
    ],
)
def test_tool_call_completed_v1_marks_the_answers_plait_wrote(
    output: str, outcome: str, aborted_by: str | None
) -> None:
    lifted = v1(
        {"type": "ToolCallCompleted", "call_id": "c1", "output": output, "outcome": outcome}
    )
    assert lifted == ToolCallCompleted("c1", output, outcome, aborted_by=aborted_by)  # type: ignore[arg-type]


def test_a_tool_output_stored_as_a_blob_is_the_tool_own() -> None:
    ref = {"kind": "blob", "sha256": "ab" * 32, "size": 9000}
    lifted = v1({"type": "ToolCallCompleted", "call_id": "c1", "output": ref})
    assert lifted.aborted_by is None
