"""A streamable-HTTP server's replies, read mended as the stdio transport reads its lines.

An MCP message is UTF-8 JSON: a reply's whole body (``application/json``) or the ``data:``
lines of a ``text/event-stream``. A server that sends undecodable bytes or a lone surrogate's
``\\ud800`` escape all the same has the SDK's transport fail its reply as unparsable (only
undecodable bytes in an event stream does it read as U+FFFD). So ``mend_replies``, an
``httpx2`` response hook, has each such body read through ``mended_json``, a line at a time:
each becomes U+FFFD, and is recorded so (docs/event-log.md#text). A body that is not JSON-RPC
even mended is left to the SDK, which fails its call at once (``PARSE_ERROR``). Imports
``httpx2`` (the SDK's HTTP client): loaded only by ``_client.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Final

import httpx2

from plait.actors._text import mended_json

__all__ = ["mend_replies"]

_MESSAGES: Final = frozenset({"application/json", "text/event-stream"})
"""The content types whose bodies hold MCP messages."""


async def mend_replies(response: httpx2.Response) -> None:
    """Have ``response``'s body read mended, if it holds MCP messages (a response hook)."""
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind not in _MESSAGES:
        return
    # A twin of the response reads its stream, undoing its Content-Encoding (gzip...) once:
    # the response itself is then read as it is given, already decoded.
    raw = httpx2.Response(
        response.status_code,
        headers=response.headers,
        stream=response.stream,
        request=response.request,
    )
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]
    response.stream = _MendedBody(raw)


class _MendedBody(httpx2.AsyncByteStream):
    """A body, decoded, given on as soon as a line of it ends, each mended.

    Mending a line at a time is mending the whole: neither a UTF-8 sequence nor a JSON
    escape holds a line end, and an event reaches the SDK as soon as it has come.
    """

    def __init__(self, raw: httpx2.Response) -> None:
        self._raw = raw

    async def __aiter__(self) -> AsyncIterator[bytes]:
        held = bytearray()
        async with contextlib.aclosing(self._raw.aiter_bytes()) as chunks:
            async for chunk in chunks:
                held += chunk
                last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
                if last >= 0:
                    end = len(held) - len(chunk) + last + 1
                    yield mended_json(bytes(held[:end]))
                    del held[:end]
        if held:
            yield mended_json(bytes(held))

    async def aclose(self) -> None:
        """Close the response read underneath (the connection goes back to the pool)."""
        await self._raw.aclose()
