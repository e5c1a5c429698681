"""The model client: Chat Completions streaming against any OpenAI-compatible server, or the
Responses API (``wire_api = "responses"``: ``actors/_responses.py``).

The ``openai`` SDK supplies configuration: the base URL, auth and other headers, TLS settings.
plait sends the request over its own HTTP/1.1 client (``actors/_transport.py``; the SDK's client
when a proxy is configured), encodes the body and decodes the SSE stream with msgspec, because
the SDK's HTTP stack, request transform and pydantic chunk objects cost more than the rest of a
turn (docs/models.md#the-connection). plait also does its own retries, so that every failed
attempt is reported (``on_attempt_failed``) and can be recorded as a ``ModelRequestFailed``
event.

``openai`` is imported when a client is built, never at module import: it takes about a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from plait._errors import ModelError
from plait.actors._content_shape import Fallback, reshaped
from plait.actors._model_failures import dropped, status_failure
from plait.actors._model_types import (
    AttemptFailed,
    Exchange,
    ModelRequest,
    ModelSettings,
    RequestTiming,
    log,
)
from plait.actors._responses import (
    ENCRYPTED_REASONING,
    ResponsesReader,
    responses_body,
    responses_tools,
    without_bare_reasoning,
)
from plait.actors._stream import (
    Assembly,
    Cut,
    Failure,
    ModelReply,
    _Chunk,
    decode_chunk,
    ignore,
    request_pieces,
)
from plait.actors._text import decoded_mended
from plait.actors._transport import (
    ConnectFailed,
    LineTooLong,
    ReadTimedOut,
    StreamBroken,
    Transport,
)
from plait.events.projections import ContentShape

if TYPE_CHECKING:
    import ssl

__all__ = ["AttemptFailed", "ModelClient", "ModelReply", "ModelRequest", "ModelSettings"]


MAX_BACKOFF_SEC = 8.0
"""The longest wait between two attempts, whatever the backoff or a ``retry-after`` header say."""


class ModelClient:
    """Stream completions from one OpenAI-compatible server; use it on one event loop."""

    def __init__(self, settings: ModelSettings) -> None:
        """Build the SDK client; raise ``ModelError(kind="auth")`` when no API key is set."""
        api_key = settings.api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ModelError(
                "no API key for the model server: set OPENAI_API_KEY "
                "(any non-empty string will do for a local server)",
                kind="auth",
                attempts=0,
            )
        import openai  # lazily: importing it takes about a second

        self.settings = settings
        """The settings this client was built with."""
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=api_key,
            timeout=settings.timeout_sec,
            max_retries=0,  # plait retries itself, so that each attempt is reported
            http_client=openai.DefaultAsyncHttpxClient(verify=_tls_context()),
        )
        self.base_url = str(self._client.base_url).rstrip("/")
        """The base URL requests go to, after the environment and SDK defaults applied."""
        self._headers = {"Content-Type": "application/json", **settings.headers}
        self._transport: Transport | None = None  # None: through the SDK's client (a proxy)
        if not _proxied(self.base_url):
            sdk = {**self._client.default_headers, **self._client.auth_headers}
            headers = {name: value for name, value in sdk.items() if isinstance(value, str)}
            self._transport = Transport(
                self.base_url, {**headers, **self._headers}, timeout_sec=settings.timeout_sec
            )
        self._usage_asked = True  # False once the server refused stream_options
        self._cap_field: str | None = None  # the cap's field, once the server named it
        self._empty: ContentShape | None = None  # the content shape the server took, once
        # it refused another
        self._include = True  # False once the server refused encrypted reasoning
        self._bare_reasoning = True  # False once it refused reasoning items with no text
        self._responses_tools: tuple[object, list[dict[str, object]]] | None = None  # the
        # last tool list asked for on the Responses API, and its shape there

    async def complete(
        self,
        request: ModelRequest,
        *,
        on_text: Callable[[str], None] = ignore,
        on_attempt_failed: Callable[[AttemptFailed], None] = ignore,
        on_reasoning: Callable[[str], None] = ignore,
        on_sent: Callable[[], object] = lambda: None,
    ) -> ModelReply:
        """Stream one completion, calling ``on_text`` with each text fragment as it arrives
        (and ``on_reasoning`` with each fragment of reasoning); ``on_sent`` once the first
        attempt's request is written.

        Retries 429, 5xx, connection failures and streams that drop before any text was
        passed to ``on_text``, but not the same server answer twice (an HTTP 500 and its
        message, a stream without a byte of the reply); ``on_attempt_failed`` hears of every
        failed attempt. A server that refuses ``stream_options``, or ``max_tokens`` for
        ``max_completion_tokens``, is asked again at once without it, and this client does
        not send it again; one that fails on the content of an assistant message with tool
        calls and no text is asked again at once, once, with the next shape
        (docs/models.md#content-shapes), and is sent the shape that worked from then on.
        Raises ``ModelError`` when retries are spent or retrying cannot help. Cancelling the
        calling task closes the HTTP stream and raises ``CancelledError``.

        A reply that passes ``max_output_tokens`` (as counted here: ``token_limit``),
        ``max_reply_bytes`` or ``max_reply_sec`` is cut: the stream is closed and the reply
        returned as it stood, ``finish_reason`` ``length`` and ``cut_by`` the limit.
        """
        responses = request.options.wire_api == "responses"
        body = self._responses_body(request) if responses else self._body(request)
        path = "/responses" if responses else "/chat/completions"
        attempt, limit = 0, self._max_attempts
        cap = request.options.max_output_tokens
        fallback = Fallback()  # the content shape asked again with, once
        before: str | None = None  # the last failure, to tell an answer that repeats
        while True:
            attempt += 1
            assembly = Assembly(
                on_text, on_reasoning, max_tokens=cap, max_bytes=self.settings.max_reply_bytes
            )
            exchange = Exchange(
                path,
                request_pieces(body, "input" if responses else "messages"),
                assembly,
                self._reader(assembly, responses),
                on_sent,
            )
            try:
                await self._attempt_within(exchange)
            except Failure as failure:
                adapted = self._adapt(failure, body, request)
                if not adapted and not assembly.text and not responses:
                    adapted = fallback.reshape(failure, body)
                if adapted:
                    limit += 1  # the server said what it takes: this attempt does not count
                    message = f"{failure.message}; sent again {adapted}"
                    on_attempt_failed(AttemptFailed(attempt, message, failure.status, 0.0))
                    continue
                # Nothing changes between two attempts: an answer that came back the same
                # (or again once the shape changed) would a third time too.
                refused = "" if assembly.text else fallback.refused(failure)
                repeated = failure.deterministic and failure.message == before
                before = failure.message
                retry = failure.retryable and not assembly.text and attempt < limit
                retry = retry and not (refused or repeated)
                delay = self._delay(attempt, failure.retry_after) if retry else None
                on_attempt_failed(AttemptFailed(attempt, failure.message, failure.status, delay))
                if delay is None:
                    message = failure.message
                    if refused:
                        message += refused
                    elif repeated:
                        message += " (the same answer twice: not asked again)"
                    elif failure.retryable and attempt > 1:
                        message += f" (gave up after {attempt} attempts)"
                    raise ModelError(
                        message, kind=failure.kind, status=failure.status, attempts=attempt
                    ) from failure.__cause__
                await asyncio.sleep(delay)
                continue
            if fallback.shape is not None:
                # The server took the next shape where it failed on the first: it is sent
                # from now on, to every session (docs/models.md#content-shapes).
                self._empty = fallback.shape
            return assembly.reply()

    @property
    def content_shape(self) -> ContentShape | None:
        """The content shape this client sends assistant messages with tool calls and no text
        in, once its server failed on another and took it; ``None`` until then: as each
        request holds them (docs/models.md#content-shapes). A conversation builds its requests
        in it, so that a request need not be reshaped."""
        return self._empty

    def _body(self, request: ModelRequest) -> dict[str, object]:
        """The request body: the messages and tools, then the session's options."""
        options = request.options
        messages = request.messages
        if self._empty is not None and request.empty != self._empty:
            # Built before this client took another shape, or by a caller that does not
            # say: the whole history is decoded and encoded again, once for this request.
            messages = reshaped(messages, self._empty)
        body: dict[str, object] = {"model": self.settings.model, "messages": messages}
        if request.tools:
            body["tools"] = request.tools
            if options.parallel_tool_calls is not None:  # refused without tools
                body["parallel_tool_calls"] = options.parallel_tool_calls
        body["stream"] = True
        if self._usage_asked:
            body["stream_options"] = {"include_usage": True}
        if options.max_output_tokens is not None:
            body[self._cap_field or options.max_tokens_field] = options.max_output_tokens
        for name in ("temperature", "top_p", "seed", "stop", "reasoning_effort"):
            value = getattr(options, name)
            if value is not None:
                body[name] = value
        body.update(options.extra_body)
        return body

    def _responses_body(self, request: ModelRequest) -> dict[str, object]:
        """The request body on the Responses API (docs/models.md#wires)."""
        tools = self._responses_tools
        if tools is None or tools[0] is not request.tools:  # a conversation's tools are one
            # object turn after turn: made again only when they change
            tools = self._responses_tools = (request.tools, responses_tools(request.tools))
        body = responses_body(
            self.settings.model,
            request.options,
            request.messages,
            tools[1],
            given=request.responses,
            include=self._include,
        )
        if not self._bare_reasoning and (kept := without_bare_reasoning(body["input"])):
            body["input"] = kept
        return body

    def _reader(self, assembly: Assembly, responses: bool) -> Callable[[bytes], None]:
        """What takes each line of an attempt's stream into ``assembly``."""
        if not responses:
            return lambda line: self._feed(line, assembly)
        reader = ResponsesReader(assembly)

        def read(line: bytes) -> None:
            if line.startswith(b"data:") and not assembly.done:  # not ``event:`` lines
                reader.feed(line[5:].strip())

        return read

    def _adapt(self, failure: Failure, body: dict[str, object], request: ModelRequest) -> str:
        """Change ``body`` (and what this client sends from now on) when the server refused a
        field plait can do without or send otherwise; say how, or ``""``."""
        if failure.kind != "bad_request":
            return ""
        said = failure.message.lower()
        if "stream_options" in body and "stream_options" in said:
            self._usage_asked = False
            del body["stream_options"]
            return "without stream_options (so the server sends no usage: plait estimates it)"
        if "max_tokens" in body and "max_completion_tokens" in said:
            self._cap_field = "max_completion_tokens"
            body["max_completion_tokens"] = body.pop("max_tokens")
            return "with max_completion_tokens instead of max_tokens"
        if "include" in body and ("include" in said or ENCRYPTED_REASONING in said):
            self._include = False
            del body["include"]
            return "without include (its reasoning is not sent back with the next request)"
        previous = body.get("previous_response_id")
        if previous and request.responses and "previous response" in said and "not found" in said:
            del body["previous_response_id"]  # (docs/models.md#stored-responses)
            body["input"] = request.responses.items
            if not self._bare_reasoning and (kept := without_bare_reasoning(body["input"])):
                body["input"] = kept
            return f"with the whole history: the server no longer has response {previous}"
        if self._bare_reasoning and "content" in said:
            kept = without_bare_reasoning(body.get("input"))
            if kept is not None:
                self._bare_reasoning = False
                body["input"] = kept
                return "without the reasoning items that hold no reasoning text"
        return ""

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._transport is not None:
            await self._transport.aclose()
        await self._client.close()

    @property
    def _max_attempts(self) -> int:
        return max(1, self.settings.max_attempts)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, MAX_BACKOFF_SEC)
        return min(self.settings.backoff_sec * 2.0 ** (attempt - 1), MAX_BACKOFF_SEC)

    async def _attempt_within(self, exchange: Exchange) -> None:
        """``_attempt``, its reply cut where it passes a limit (the stream is then closed:
        a server that does not stop would otherwise hold the connection)."""
        timing = RequestTiming() if log.isEnabledFor(logging.DEBUG) else None
        try:
            async with asyncio.timeout(self.settings.max_reply_sec) as deadline:
                await self._attempt(exchange, timing)
        except Cut:
            pass
        except TimeoutError:
            if not deadline.expired():
                raise
            exchange.assembly.cut("max_reply_sec")
        finally:
            if timing is not None:
                timing.tell(f"{self.base_url}{exchange.path}", exchange.content)

    async def _attempt(self, exchange: Exchange, timing: RequestTiming | None = None) -> None:
        """Send one request and feed its stream to its assembly; raise ``Failure`` on
        failure."""
        assembly, read = exchange.assembly, exchange.read
        if self._transport is None:
            exchange.on_sent()  # the SDK's client writes it in a moment
            await self._attempt_through_sdk(exchange, timing)
            return
        try:
            async with self._transport.post(
                exchange.path, exchange.content, exchange.on_sent
            ) as response:
                if timing is not None:
                    timing.answered(response.status)
                if response.status >= 400:
                    body = await response.read()
                    raise status_failure(response.status, response.reason, response.headers, body)
                try:
                    # A line holds one chunk: one longer than any chunk the reply's limit
                    # lets through (its text JSON-escaped, 6 bytes a byte at most) is cut.
                    longest = 6 * self.settings.max_reply_bytes + (1 << 16)
                    await response.each_line(read, longest)
                except LineTooLong as exc:
                    assembly.cut("max_reply_bytes")
                    raise Cut(str(exc)) from exc
                except ReadTimedOut as exc:
                    if not assembly.done:
                        raise self._timeout() from exc
                except StreamBroken as exc:
                    if not assembly.done:
                        raise dropped(assembly, str(exc)) from exc
        except ReadTimedOut as exc:
            raise self._timeout() from exc
        except (ConnectFailed, StreamBroken) as exc:
            raise self._unreachable(exc) from exc
        self._check_whole(assembly)

    async def _attempt_through_sdk(self, exchange: Exchange, timing: RequestTiming | None) -> None:
        """``_attempt`` through the SDK's HTTP client, which speaks to proxies."""
        assembly, read = exchange.assembly, exchange.read
        import httpx2
        import openai

        try:
            # The SDK's documented route for raw requests: its headers, auth, URL and status
            # errors, without the per-message request transform.
            response = await self._client.post(
                exchange.path,
                cast_to=httpx2.Response,
                content=b"".join(exchange.content),
                options={"headers": self._headers},
                stream=True,
            )
        except openai.APIStatusError as exc:
            raw = exc.response
            await raw.aread()
            raise status_failure(
                raw.status_code, raw.reason_phrase, raw.headers, raw.content
            ) from exc
        except openai.APITimeoutError as exc:
            if isinstance(exc.__cause__, httpx2.ConnectTimeout | httpx2.PoolTimeout):
                raise self._unreachable(exc.__cause__) from exc
            raise self._timeout() from exc
        except openai.APIConnectionError as exc:
            raise self._unreachable(exc.__cause__ or exc) from exc
        if timing is not None:
            timing.answered(response.status_code)
        async with contextlib.aclosing(response):
            try:
                async for line in response.aiter_lines():
                    read(line.encode())
            except httpx2.TimeoutException as exc:
                if not assembly.done:
                    raise self._timeout() from exc
            except httpx2.TransportError as exc:
                if not assembly.done:
                    raise dropped(assembly, str(exc) or type(exc).__name__) from exc
        self._check_whole(assembly)

    @staticmethod
    def _feed(line: bytes, assembly: Assembly) -> None:
        """Take one line of the SSE stream."""
        if not line.startswith(b"data:") or assembly.done:
            return  # blank separators, ``event:``/``id:`` fields, ``:`` comments
        data = line[5:].strip()
        if data == b"[DONE]":
            assembly.done = True  # the body is still read to its end: the connection is reused
            return
        try:
            chunk = _decode(data)
        except msgspec.DecodeError as exc:
            raise Failure(
                "malformed", f"malformed stream from the model server: {exc}: {data[:80]!r}"
            ) from exc
        assembly.feed(chunk)

    @staticmethod
    def _check_whole(assembly: Assembly) -> None:
        if not assembly.done and assembly.finish_reason is None:
            raise dropped(assembly, "the stream ended without a finish_reason or [DONE]")

    def _timeout(self) -> Failure:
        return Failure(
            "timeout", f"no data from the model server for {self.settings.timeout_sec:g} s"
        )

    def _unreachable(self, cause: BaseException) -> Failure:
        detail = str(cause) or type(cause).__name__
        return Failure("unavailable", f"cannot reach the model server at {self.base_url}: {detail}")


def _decode(data: bytes) -> _Chunk:
    """A chunk; undecodable bytes and lone surrogates in its text are read as U+FFFD, and so
    recorded (docs/event-log.md#text)."""
    return decoded_mended(decode_chunk, data)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The process's one TLS context, as the SDK's client would make it (the system's trust,
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` read once): making one reads every trusted
    certificate, about 18 ms, which each ``Runtime`` paid again."""
    import httpx2

    return httpx2.create_ssl_context()


def _proxied(url: str) -> bool:
    """Whether the environment sends requests for ``url`` through a proxy (``HTTPS_PROXY`` and
    the like, less ``NO_PROXY``), as the SDK's HTTP client would."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.netloc)
