"""The HTTP/1.1 client against real TCP servers that answer byte for byte as a test says."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from plait.actors._transport import (
    ConnectFailed,
    LineTooLong,
    ReadTimedOut,
    StreamBroken,
    Transport,
    _Conn,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

SSE = b"data: one\n\ndata: two\r\n\r\ndata: [DONE]\n\n"


class RawServer:
    """A loopback server calling ``handler`` for each connection, counting connections."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request


def chunked(*pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n"


async def lines_of(transport: Transport, content: bytes = b"{}") -> tuple[int, list[bytes]]:
    async with transport.post("/chat/completions", content) as response:
        lines: list[bytes] = []
        await response.each_line(lines.append)
        return response.status, lines


@pytest.fixture
async def keeps_answering() -> AsyncIterator[RawServer]:
    """Answers every request on a connection with the SSE body, in chunks split mid-line."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await raw.read_request(reader)
            writer.write(chunked(SSE[:7], SSE[7:30], SSE[30:]))
            await writer.drain()

    async with RawServer(handler) as raw:
        yield raw


async def test_lines_come_whole_and_the_connection_serves_the_next_request(
    keeps_answering: RawServer,
) -> None:
    transport = Transport(keeps_answering.url, {"Authorization": "Bearer k"}, timeout_sec=5)

    first = await lines_of(transport, b'{"n": 1}')
    second = await lines_of(transport, b'{"n": 2}')
    await transport.aclose()

    expected = [b"data: one", b"", b"data: two", b"", b"data: [DONE]", b""]
    assert first == second == (200, expected)
    assert keeps_answering.connections == 1
    request = keeps_answering.requests[1]
    assert request.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in request
    assert b"\r\nContent-Length: 8\r\n" in request
    assert request.endswith(b'\r\n\r\n{"n": 2}')


async def test_what_the_line_taker_raises_ends_the_answer_and_its_connection(
    keeps_answering: RawServer,
) -> None:
    transport = Transport(keeps_answering.url, {}, timeout_sec=5)
    taken: list[bytes] = []

    def take(line: bytes) -> None:
        if line == b"data: two":
            raise ValueError("not this one")
        taken.append(line)

    with pytest.raises(ValueError, match="not this one"):
        async with transport.post("/chat/completions", b"{}") as response:
            await response.each_line(take)
    again = await lines_of(transport)
    await transport.aclose()

    assert taken == [b"data: one", b""]  # nothing after the line it refused
    assert again[1][-2:] == [b"data: [DONE]", b""]
    assert keeps_answering.connections == 2  # the one it stopped reading was not kept


async def test_a_body_by_length_and_one_up_to_the_close() -> None:
    bodies = [
        b'HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\n{"e": "no"}',
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + SSE,
    ]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while bodies:
            await raw.read_request(reader)
            body = bodies.pop(0)
            writer.write(body)
            await writer.drain()
            if b"Connection: close" in body:
                return

    async with RawServer(handler) as raw:
        transport = Transport(raw.url, {}, timeout_sec=5)
        async with transport.post("/x", b"{}") as response:
            error = (response.status, response.reason, await response.read())
        status, lines = await lines_of(transport)
        await transport.aclose()

    assert error == (400, "Bad Request", b'{"e": "no"}')
    assert (status, lines[-2:]) == (200, [b"data: [DONE]", b""])
    assert raw.connections == 1  # the length-framed answer left the connection usable


async def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(chunked(SSE))
        await writer.drain()  # and close, though the answer said nothing of it

    async with RawServer(handler) as raw:
        transport = Transport(raw.url, {}, timeout_sec=5)
        first = await lines_of(transport)
        second = await lines_of(transport)
        await transport.aclose()

    assert first == second
    assert raw.connections == 2


async def test_an_interim_answer_is_skipped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + chunked(SSE))

    async with RawServer(handler) as raw:
        status, lines = await lines_of(Transport(raw.url, {}, timeout_sec=5))

    assert (status, lines[0]) == (200, b"data: one")


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (b"", StreamBroken, "closed the connection without answering"),
        (b"SMTP ready\r\n\r\n", StreamBroken, "not a status line: 'SMTP ready'"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ndata: one\n",
            StreamBroken,
            "closed in the middle of the answer",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", StreamBroken, "zz"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ReadTimedOut, "no data"),
    ],
    ids=["no answer", "not http", "short body", "bad chunk size", "silence"],
)
async def test_a_broken_answer_is_named(
    answer: bytes, error: type[Exception], message: str
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(answer)
        await writer.drain()
        if error is ReadTimedOut:
            await reader.read()  # stay silent until the client gives up
            return

    async with RawServer(handler) as raw:
        with pytest.raises(error, match=message):
            await lines_of(Transport(raw.url, {}, timeout_sec=0.3))


async def test_nothing_listening_is_a_connect_failure() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        transport = Transport(f"http://127.0.0.1:{port}", {}, timeout_sec=5)
        with pytest.raises(ConnectFailed):
            await lines_of(transport)


def test_only_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Transport("ftp://example.com/v1", {}, timeout_sec=1)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the machine's openssl."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_is_verified_against_the_trust_the_environment_names(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await raw.read_request(reader)
            writer.write(chunked(SSE))
            await writer.drain()

    async with RawServer(handler, tls) as raw:
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await lines_of(Transport(raw.url, {}, timeout_sec=5))  # not trusted: refused

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = Transport(raw.url, {}, timeout_sec=5)
        first, second = await lines_of(trusted), await lines_of(trusted)
        await trusted.aclose()

    assert first == second == (200, [b"data: one", b"", b"data: two", b"", b"data: [DONE]", b""])
    assert raw.connections == 1  # both requests on one kept connection (the refused
    # handshake never reached the handler)


async def test_the_last_chunk_and_its_empty_line_may_come_apart() -> None:
    # A connection's bytes as they might be cut into reads: the answer is whole only once the
    # empty line after the last chunk (and any trailers) is in, and nothing of it is left over
    # to be taken for the next answer's head.
    loop = asyncio.get_running_loop()
    conn = _Conn(loop, timeout_sec=5)
    mine, theirs = socket.socketpair()
    with mine, theirs:
        await loop.create_connection(lambda: conn, sock=mine)
        for answer in [b"0\r\n", b"0\r\nX-Trailer: 1\r\n"]:
            conn.data_received(chunked(SSE).removesuffix(b"0\r\n\r\n") + answer)
            assert not conn.done
            conn.data_received(b"\r\n")
            assert conn.done
            assert [piece async for piece in conn.pieces()] == [SSE]
            conn.reset()
        conn.data_received(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        assert (conn.head, conn.done) == ((204, "No Content", {"content-length": "0"}), True)
        conn.close()


async def test_on_sent_hears_the_request_is_written_before_any_answer(
    keeps_answering: RawServer,
) -> None:
    transport = Transport(keeps_answering.url, {}, timeout_sec=5)
    heard: list[int] = []

    async with transport.post("/chat/completions", b"{}", lambda: heard.append(0)) as response:
        assert heard == [0]  # the head of the answer came after
        heard.append(response.status)
        await response.read()
    await transport.aclose()

    assert heard == [0, 200]


async def test_a_line_past_max_line_ends_the_answer_without_being_kept() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"c\r\ndata: short\n\r\n")  # a whole line, then one without an end
        with contextlib.suppress(ConnectionError):
            while True:  # one line that never ends
                writer.write(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")
                await writer.drain()

    async with RawServer(handler) as raw:
        transport = Transport(raw.url, {}, timeout_sec=5)
        taken: list[bytes] = []
        with pytest.raises(LineTooLong, match="passed 100000 bytes"):
            async with transport.post("/chat/completions", b"{}") as response:
                await response.each_line(taken.append, max_line=100_000)
        await transport.aclose()
    assert taken == [b"data: short"]


async def test_a_large_request_goes_out_whole_in_pieces() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(chunked(SSE))
        await writer.drain()

    big = bytes(range(256)) * 40_000  # 10 MB: more than a socket takes at once
    async with RawServer(handler) as raw:
        transport = Transport(raw.url, {}, timeout_sec=5)
        async with transport.post("/chat/completions", [b"[", memoryview(big), b"]"]) as response:
            await response.each_line(lambda _: None)
        await transport.aclose()
    (request,) = raw.requests
    assert f"\r\nContent-Length: {len(big) + 2}\r\n".encode() in request
    assert request.endswith(b"\r\n\r\n[" + big + b"]")
