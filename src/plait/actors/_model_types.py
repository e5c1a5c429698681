"""What the model client is given and reports: its settings, one request, one failed attempt,
and each request's timing (``plait -vv``)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence

import msgspec

from plait.actors._content_shape import Messages
from plait.actors._stream import Assembly
from plait.events import ModelOptions
from plait.events.projections import ContentShape

__all__ = [
    "AttemptFailed",
    "Exchange",
    "ModelRequest",
    "ModelSettings",
    "RequestTiming",
    "ResponsesInput",
    "log",
]

log = logging.getLogger("plait.model")
"""Each request's size and timing, at DEBUG (``plait -vv``); nothing is measured otherwise."""


class ModelSettings(ModelOptions, frozen=True):
    """Where the model is, how hard to try, and what to ask of it (the ``ModelOptions``
    fields: ``max_output_tokens``, ``temperature``... ``headers``, ``send_reasoning``)."""

    base_url: str | None = None
    """The server's base URL (``.../v1``); ``None``: ``OPENAI_BASE_URL``, else OpenAI's."""
    api_key: str | None = None
    """The API key; ``None``: ``OPENAI_API_KEY``. Local servers accept any string."""
    model: str = "gpt-4o-mini"
    """The model name sent with each request."""
    timeout_sec: float = 60.0
    """Seconds allowed to connect, and for each read: the longest silence inside a stream."""
    max_attempts: int = 3
    """Requests sent at most for one completion, the first included."""
    backoff_sec: float = 0.5
    """Wait before attempt n+1 is ``backoff_sec * 2**(n-1)`` (or ``retry-after``), at most 8 s."""
    context_window: int | None = None
    """The model's context window in tokens, when known (for compaction thresholds)."""
    max_reply_bytes: int = 8 << 20
    """Most bytes of a reply kept (text, reasoning and call arguments, UTF-8): plait stops
    reading it there, and its task ends ``truncated`` (docs/models.md#reply-limits)."""
    max_reply_sec: float = 600.0
    """Most seconds one attempt's reply may stream, from its request; then it is cut too."""

    def options(self) -> ModelOptions:
        """What a session records of these settings (credentials left out)."""
        fields = {name: getattr(self, name) for name in ModelOptions.__struct_fields__}
        fields["headers"] = {
            name: "[redacted]" if _SECRET.search(name) else value
            for name, value in self.headers.items()
        }
        return ModelOptions(**fields)


_SECRET = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)
"""Header names whose values the log does not keep."""


class ModelRequest(msgspec.Struct, frozen=True):
    """One completion to ask for."""

    messages: Messages
    """The conversation as OpenAI chat messages (or that list already encoded)."""
    tools: Sequence[Mapping[str, object]] | msgspec.Raw = []
    """OpenAI function tool specs (``{"type": "function", "function": {...}}``), in order
    (or that list already encoded; an empty list offers none)."""
    options: ModelOptions = ModelOptions()
    """The session's sampling options and output cap (its headers are the client's)."""
    empty: ContentShape | None = None
    """How ``messages`` carry the content of an assistant message with tool calls and no
    text, when it is known (docs/models.md#content-shapes). Messages in another shape than
    the client's ``content_shape`` are decoded and encoded again for the request: build
    them in it."""
    responses: ResponsesInput | None = None
    """On the Responses API: the instructions and input items the conversation built, in
    place of ``messages``; ``None``: made from ``messages``, which hold no reasoning items."""


class ResponsesInput(msgspec.Struct, frozen=True):
    """What a request on the Responses API sends of a conversation (docs/models.md#wires)."""

    instructions: str
    """The system instructions."""
    items: msgspec.Raw
    """The whole history as input items, reasoning items included."""
    previous_response_id: str = ""
    """The stored response the history goes on from, when the server keeps responses
    (docs/models.md#stored-responses); empty: the whole history is sent."""
    after: msgspec.Raw | None = None
    """With ``previous_response_id``: the input items after that response, which are sent in
    place of ``items`` (the whole history, sent again if the server no longer has it)."""


class AttemptFailed(msgspec.Struct, frozen=True):
    """One request attempt failed (the fields of a ``ModelRequestFailed`` event)."""

    attempt: int
    """The attempt that failed, from 1."""
    error: str
    """What went wrong, one line for people."""
    status: int | None
    """The HTTP status, when the server answered with one."""
    retry_in_sec: float | None
    """Seconds until the next attempt; ``None`` when there will be none."""


class Exchange(msgspec.Struct, frozen=True):
    """One attempt's request and how its stream is read: on either wire, the same path
    through the client's HTTP code."""

    path: str
    """Where it goes, after the base URL (``/chat/completions``, ``/responses``)."""
    content: list[bytes | memoryview]
    """The body, in pieces."""
    assembly: Assembly
    """The reply being put together."""
    read: Callable[[bytes], None]
    """Takes each line of the stream into ``assembly``."""
    on_sent: Callable[[], object]
    """Told once the request is written."""


class RequestTiming:
    """One request's timing, for ``plait -vv``."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.first: float | None = None
        self.status: int | None = None

    def answered(self, status: int) -> None:
        """The response's status line and headers came."""
        self.first, self.status = time.monotonic(), status

    def tell(self, url: str, content: Sequence[bytes | memoryview]) -> None:
        """Log the request's size and timing."""
        total = (time.monotonic() - self.began) * 1000
        sent = sum(len(piece) for piece in content)
        if self.first is None:
            log.debug("POST %s: %d bytes sent, no answer after %.0f ms", url, sent, total)
            return
        first = (self.first - self.began) * 1000
        log.debug(
            "POST %s: %d bytes sent, HTTP %s, first byte after %.0f ms, total %.0f ms",
            url, sent, self.status, first, total,
        )  # fmt: skip
