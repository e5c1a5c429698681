"""The benches' model server: ``ScriptedModelServer``'s streamed replies, paced, on one loop.

A bench of many concurrent tasks needs a model server whose replies take the time they are
scripted to take however many stream at once, as a real one on its own machine would.
``ScriptedModelServer`` serves each connection on a thread of its own: on two cores, 1,000 of
its 0.2 s replies at once take it about 1.5 s even with a client that does nothing else, so it,
not the client, would be measured. This server sends the same chunks (``scripted_wire``) from
one asyncio loop, keeping connections alive as real servers do; ``python bench/paced_model.py
N`` prints how long N replies at once take it with a bare client (the floor of the benches).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import msgspec

from plait import _scripted_wire as wire
from plait._scripted_wire import Step

__all__ = ["PacedModelServer", "floor"]

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class PacedModelServer:
    """Serves ``step`` as the reply to every chat completion request, on a thread of its own."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-model", daemon=True)
        self._stop: asyncio.Event | None = None
        self.port = 0
        self.served = 0
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> PacedModelServer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the paced model server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=4096)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
        # The connections still open (a client that was killed, or keeps its connection
        # alive): closed before the loop is, or their sockets are left for the collector.
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await asyncio.sleep(0)  # the transports' closing callbacks run

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while head := await reader.readuntil(b"\r\n\r\n"):
                    length = 0
                    for line in head.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    raw = await reader.readexactly(length)
                    await self._reply(msgspec.json.decode(raw), len(raw), writer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _reply(self, body: dict[str, Any], size: int, writer: asyncio.StreamWriter) -> None:
        self.served += 1
        step = self.step
        head = {"id": f"chatcmpl-{self.served}", "object": "chat.completion.chunk"}
        head |= {"created": 0, "model": body.get("model", "scripted")}
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        chunks = wire.chunks(step, head, [], wire.usage(step, size), with_usage, frozenset())
        lines = [b"data: " + msgspec.json.encode(chunk) + b"\n\n" for chunk in chunks]
        lines.append(b"data: [DONE]\n\n")
        writer.write(_HEAD)
        # Each chunk at its own time from the reply's start, as a server generating tokens at
        # a steady rate sends them: sleeps that each wake late on a busy machine would add
        # their lateness up (13 chunks 0.5 ms late each: a reply 10% longer than scripted).
        start = self._loop.time()
        for i, line in enumerate(lines):
            if i and step.chunk_delay:
                await asyncio.sleep(start + i * step.chunk_delay - self._loop.time())
            if writer.is_closing():  # the client went away (a bench killed it)
                return
            writer.write(b"%x\r\n%s\r\n" % (len(line), line))
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def floor(url: str, n: int) -> float:
    """Seconds ``n`` streamed replies at once take from the server at ``url`` with a bare
    client (raw sockets, no parsing beyond the framing's end)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    # Usage asked for, as plait's client asks: the reply timed is the reply a worker gets.
    body = b'{"model": "m", "messages": [], "stream": true, ' + (
        b'"stream_options": {"include_usage": true}}'
    )
    request = (
        f"POST {parts.path.rstrip('/')}/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def one() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            data += await reader.read(65536)
        writer.close()

    async def all_at_once() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - start

    return asyncio.run(all_at_once())


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with PacedModelServer(Step(text="abcdef" * 10, chunk_chars=6, chunk_delay=0.02)) as server:
        print(f"{count} replies at once, with a bare client: {floor(server.base_url, count):.2f} s")
