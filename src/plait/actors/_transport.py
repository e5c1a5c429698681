"""A lean HTTP/1.1 client for one origin: POST a body, read the streamed answer line by line.

The model call was most of a turn's CPU, and most of that was the general-purpose HTTP stack
under the ``openai`` SDK (docs/models.md#the-connection). A streamed completion needs little of
it: one request, a status, a few headers, a body framed by chunks or by a length, read as lines.
This client parses the answer as bytes arrive (an ``asyncio.Protocol``: no task, no timer per read),
keeps connections alive for the next request, and raises one of three errors, so that the model
client can say what went wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from urllib.parse import urlsplit

__all__ = [
    "ConnectFailed",
    "HttpResponse",
    "LineTooLong",
    "ReadTimedOut",
    "StreamBroken",
    "Transport",
]


class ConnectFailed(Exception):
    """No connection to the server (refused, unknown host, TLS, or connect timeout)."""


class ReadTimedOut(Exception):
    """The server sent nothing for the read timeout."""


class StreamBroken(Exception):
    """The connection closed, or the server broke HTTP, before the answer was whole."""


class LineTooLong(Exception):
    """A line of the answer passed the most bytes its reader takes (``each_line``)."""


class _Closed(StreamBroken):
    """The connection closed before any byte of an answer (a reused one may be stale)."""


_MAX_HEAD = 1 << 16
"""The most bytes a status line and headers may take, or a chunk-size line."""
_Pieces = Sequence[bytes | memoryview]  # a request, in pieces not joined (a prompt may be large)
_SLICE = 1 << 18
"""The most bytes of a request handed to the socket's transport at once."""


class HttpResponse:
    """One answer: its status, headers (names lower-cased) and a body read once."""

    def __init__(self, status: int, reason: str, headers: dict[str, str], conn: _Conn) -> None:
        self.status = status
        """The HTTP status code."""
        self.reason = reason
        """The status line's reason phrase."""
        self.headers = headers
        """Header names lower-cased; a repeated header keeps its last value."""
        self._conn = conn

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([piece async for piece in self._conn.pieces()])

    async def each_line(self, take: Callable[[bytes], object], max_line: int | None = None) -> None:
        """Hand ``take`` each of the body's lines (without its line end: ``\\n`` or ``\\r\\n``)
        as its bytes arrive, from the connection's read callback (no task is woken per read);
        return once the body is whole. What ``take`` raises ends the reading and is raised
        here, as is the connection's failure, and ``LineTooLong`` for a line of more than
        ``max_line`` bytes (it is not kept whole meanwhile)."""
        await self._conn.each_line(take, max_line)


class _Conn(asyncio.Protocol):
    """One connection, parsing each answer as its bytes arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_sec: float) -> None:
        self._loop = loop
        self._timeout = timeout_sec
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._heard = 0.0  # loop time of the last bytes received
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self.lost = False
        self.reset()

    def reset(self) -> None:
        """Ready for the next answer."""
        self.head: tuple[int, str, dict[str, str]] | None = None
        self.keep_alive = True
        self.done = False
        self._error: StreamBroken | ReadTimedOut | None = None
        self._pieces: list[bytes] = []
        self._take: Callable[[bytes], object] | None = None  # each_line's: takes pieces as lines
        self._rest = b""  # the start of a line whose end is still to come
        self._take_error: Exception | None = None
        self._max_line: int | None = None  # each_line's: the longest line it takes
        self._left = 0  # body bytes left: of the chunk (chunked) or of the body (by length)
        self._framing = ""  # "chunked", "length" or "eof", once the head is read
        self._got_any = False

    # --- the consumer's side ----------------------------------------------------------------

    async def send(self, pieces: _Pieces) -> None:
        """Write ``pieces`` in slices, waiting while the socket's buffer is full: asyncio would
        otherwise copy what the socket did not take at once, twice (a 50 MB prompt: 100 MB)."""
        assert self._transport is not None
        self._heard = self._loop.time()
        self._arm()
        for piece in pieces:
            with memoryview(piece) as view:
                for start in range(0, len(view), _SLICE):
                    if self._error is not None:
                        raise self._error
                    self._transport.write(view[start : start + _SLICE])
                    self._heard = self._loop.time()  # writing is not a silence
                    while self._writable is not None:
                        await self._writable

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def wait_head(self) -> tuple[int, str, dict[str, str]]:
        while self.head is None:
            await self._wait()
        return self.head

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's bytes, unframed, as they come."""
        while True:
            if self._pieces:
                pieces, self._pieces = self._pieces, []
                for piece in pieces:
                    yield piece
            elif self.done:
                return
            else:
                await self._wait()

    async def each_line(self, take: Callable[[bytes], object], max_line: int | None) -> None:
        self._take, self._rest, self._max_line = take, b"", max_line
        try:
            pieces, self._pieces = self._pieces, []  # what came with the head
            for piece in pieces:
                self._piece(piece)
            while self._take_error is None and not self.done:
                await self._wait()
            if self._take_error is not None:
                raise self._take_error
            if self._rest:
                take(self._rest)
        finally:
            self._take = None

    def close(self) -> None:
        self._disarm()
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        """Wait for more of the answer; raise its failure once what came before is taken."""
        if self._error is None:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._error is not None and not self._pieces:
            raise self._error

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- the read timeout: one timer per silence, not one per read ---------------------------

    def _arm(self) -> None:
        self._disarm()
        self._timer = self._loop.call_at(self._heard + self._timeout, self._check)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self.done:
            return
        if self._loop.time() < self._heard + self._timeout:
            self._arm()
            return
        self._fail(ReadTimedOut(f"no data for {self._timeout:g} s"))

    def _fail(self, error: StreamBroken | ReadTimedOut) -> None:
        self._disarm()
        if self._error is None:
            self._error = error
        self.keep_alive = False
        self._wake()

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.resume_writing()  # a write waiting for room gives up: the error says why
        if self.done:
            return
        if self._framing == "eof" and exc is None:
            self._finish()
            return
        detail = f": {exc}" if exc else ""
        if not self._got_any:
            self._fail(_Closed(f"the server closed the connection without answering{detail}"))
        else:
            self._fail(StreamBroken(f"the connection closed in the middle of the answer{detail}"))

    def data_received(self, data: bytes) -> None:
        self._heard = self._loop.time()
        self._got_any = True
        self._buffer += data
        try:
            self._parse()
        except (ValueError, UnicodeError) as exc:
            self._fail(StreamBroken(f"not HTTP from the server: {exc}"))
            self.close()
            return
        if self._take is None or self.done or self._take_error is not None:
            self._wake()  # each_line's taker had the lines: its task waits for the end only

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost says the rest

    def _finish(self) -> None:
        self.done = True
        self._disarm()
        self._wake()

    def _parse(self) -> None:
        """Move what the buffer holds into the head and body pieces, as far as it goes."""
        buffer = self._buffer
        if self.head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD:
                    raise ValueError(f"a head longer than {_MAX_HEAD} bytes")
                return
            self._read_head(bytes(buffer[:end]).decode("latin-1"))
            del buffer[: end + 4]
            if self.head is None:  # an interim 1xx answer: the real one follows
                return self._parse()
        while buffer and not self.done:
            if self._framing == "chunked":
                if self._left == 0:
                    end = buffer.find(b"\r\n")
                    if end < 0:
                        if len(buffer) > _MAX_HEAD:
                            raise ValueError("a chunk-size line too long")
                        return
                    size = int(bytes(buffer[:end]).partition(b";")[0], 16)
                    if size == 0:  # the last chunk: then trailers, if any, and an empty line
                        stop = buffer.find(b"\r\n\r\n", end)
                        if stop < 0:
                            if len(buffer) > _MAX_HEAD:
                                raise ValueError(f"trailers longer than {_MAX_HEAD} bytes")
                            return  # the rest is in bytes still to come
                        del buffer[: stop + 4]
                        return self._finish()
                    del buffer[: end + 2]
                    self._left = size + 2  # the chunk and its CRLF
                take = bytes(buffer[: self._left])
                del buffer[: len(take)]
                piece = take[: max(0, self._left - 2)]  # less the chunk's CRLF
                self._left -= len(take)
                if piece:
                    self._piece(piece)
            elif self._framing == "length":
                take = bytes(buffer[: self._left])
                del buffer[: len(take)]
                self._left -= len(take)
                self._piece(take)
                if self._left == 0:
                    self._finish()
            else:
                self._piece(bytes(buffer))
                del buffer[:]

    def _piece(self, piece: bytes) -> None:
        """Keep a piece of the body for ``pieces``, or hand its lines to ``each_line``'s taker."""
        take = self._take
        if take is None:
            self._pieces.append(piece)
            return
        if self._take_error is not None:
            return  # the taker failed: the rest is not read
        *whole, self._rest = (self._rest + piece).split(b"\n")
        limit = self._max_line
        if limit is not None and max([len(self._rest), *map(len, whole)]) > limit:
            self._take_error = LineTooLong(f"a line of the answer passed {limit} bytes")
            self.keep_alive, self._rest = False, b""
            return
        try:
            for line in whole:
                take(line[:-1] if line.endswith(b"\r") else line)
        except Exception as exc:  # raised in each_line; the connection is not reused
            self._take_error = exc
            self.keep_alive = False

    def _read_head(self, text: str) -> None:
        status_line, *lines = text.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/") or not code.isdigit():
            raise ValueError(f"not a status line: {status_line[:80]!r}")
        if 100 <= int(code) < 200:
            return
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"not a header: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self.head = (int(code), reason, headers)
        self.keep_alive = headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            self._framing, self._left = "length", int(headers["content-length"])
            if self._left == 0:
                self._finish()
        else:
            self._framing, self.keep_alive = "eof", False


class Transport:
    """POST to one origin over HTTP/1.1 (TLS for ``https``), reusing idle connections."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, timeout_sec: float) -> None:
        """``headers`` go with every request; ``timeout_sec`` bounds connecting and each
        silence while an answer comes."""
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._tls = _tls_context() if url.scheme == "https" else None
        self._timeout = timeout_sec
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = self.port == (443 if self._tls else 80)
        fixed = {"Host": host if default else f"{host}:{self.port}", **headers}
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._idle: list[_Conn] = []

    @contextlib.asynccontextmanager
    async def post(
        self, path: str, content: bytes | _Pieces, on_sent: Callable[[], object] | None = None
    ) -> AsyncIterator[HttpResponse]:
        """Send ``content`` (or its pieces, in order: they are not joined) to the base URL's
        path + ``path``; yield the response, its body unread. The connection is kept for the
        next request only if the body was read whole."""
        pieces: _Pieces = [content] if isinstance(content, bytes) else content
        head = (
            f"POST {self._prefix}{path} HTTP/1.1\r\n{self._head}"
            f"Content-Length: {sum(map(len, pieces))}\r\n\r\n"
        ).encode("latin-1")
        conn, response = await self._exchange([head, *pieces], on_sent)
        try:
            yield response
        finally:
            if conn.done and conn.keep_alive and not conn.lost:
                conn.reset()
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        """Close the idle connections (and let the loop close their sockets)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        if idle:
            await asyncio.sleep(0)  # a transport closes its socket in a callback of the loop

    async def _exchange(
        self, request: _Pieces, on_sent: Callable[[], object] | None
    ) -> tuple[_Conn, HttpResponse]:
        """Send ``request``; wait for the answer's head. A kept connection that the server
        closed meanwhile (no byte came back) is dropped for the next, or a new one."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost:
                with contextlib.suppress(_Closed):
                    return conn, await self._send(conn, request, on_sent)
        return (conn := await self._connect()), await self._send(conn, request, on_sent)

    async def _send(
        self, conn: _Conn, request: _Pieces, on_sent: Callable[[], object] | None
    ) -> HttpResponse:
        try:
            await conn.send(request)
            if on_sent is not None:
                on_sent()
            status, reason, headers = await conn.wait_head()
        except BaseException:
            conn.close()
            raise
        return HttpResponse(status, reason, headers, conn)

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(loop, self._timeout), self.host, self.port, ssl=self._tls
                )
        except TimeoutError:
            raise ConnectFailed(f"no connection within {self._timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from exc
        return conn


def _tls_context() -> ssl.SSLContext:
    """The TLS settings the SDK's HTTP client would use (its CA files, ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR``)."""
    import httpx2  # only for https: a local server over plain http never needs it

    return httpx2.create_ssl_context()
