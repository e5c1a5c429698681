"""What a failed model request means: its kind, its message for people, and whether asking
again can help (docs/models.md#model-errors)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import msgspec

from plait._errors import ModelErrorKind
from plait.actors._stream import Assembly, Failure

__all__ = ["dropped", "status_failure"]

_PASSING = frozenset({502, 503, 504})
"""Server errors that say the server is not ready (a gateway, an overload): they pass."""


def dropped(assembly: Assembly, detail: str) -> Failure:
    """The failure of a stream that ended before the reply was whole."""
    if assembly.nothing:
        failure = Failure(
            "disconnected", f"the model server closed the stream before any reply: {detail}"
        )
        # A server whose stream ends before a byte of a reply, having taken the request
        # (HTTP 200), most often failed on it: the same request would end so again.
        failure.empty = failure.deterministic = True
        return failure
    streamed = sum(map(len, assembly.text))
    where = f"after {streamed} characters of text" if streamed else "before the reply was complete"
    # Retried only before any text: text already shown to someone cannot be taken back.
    return Failure("disconnected", f"the model server closed the stream {where}: {detail}")


def status_failure(status: int, reason: str, headers: Mapping[str, str], body: bytes) -> Failure:
    """The failure an error answer means, and when the server asks to be tried again."""
    kind: ModelErrorKind
    if status in (401, 403):
        kind, what = "auth", "rejected the API key"
    elif status == 429:
        kind, what = "rate_limited", "is rate limiting requests"
    elif status >= 500 or status in (408, 409):  # the SDK retries 408 and 409 too
        kind, what = "unavailable", "failed"
    else:
        kind, what = "bad_request", "refused the request"
    said = server_message(body)
    message = said[:300] or reason or "no message"
    failure = Failure(kind, f"the model server {what} ({status}): {message}", status)
    failure.said = said
    failure.deterministic = status >= 500 and status not in _PASSING
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        with contextlib.suppress(ValueError):
            failure.retry_after = float(headers.get(header, "")) * scale
            break
    return failure


def server_message(body: bytes) -> str:
    """The error message in an error answer's body (OpenAI's ``{"error": {"message"}}``, or
    another server's JSON or text), on one line, whole; ``""`` for none."""
    try:
        error: object = msgspec.json.decode(body)
    except msgspec.DecodeError:
        error = body.decode("utf-8", "replace")
    if isinstance(error, dict):
        error = error.get("error", error)
    if isinstance(error, dict):
        error = error.get("message")
    if isinstance(error, str):
        return " ".join(error[:16384].split())
    return ""
